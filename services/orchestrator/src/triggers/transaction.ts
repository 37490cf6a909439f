import { Topic, triggerTopic, dlqOf } from '@keyflow/schemas';
import {
  CompressionTypes,
  JavaCompatiblePartitioner,
  TRANSACTIONAL_RETRY,
  whileTransactionsConcurrent,
  writeCompression,
  type ConsumedMessage,
  type Kafka,
  type Producer,
} from '@keyflow/kafka';
import { derivedEventId, newMetadata, type EventCodec } from '@keyflow/contracts';
import { dlqMessage, dlqStandIn, RecordTooLargeError } from '@keyflow/ops';
import { keyPartition, messageBytes } from '@keyflow/kafka';
import { splitBySize, type Msg } from '../engine/commit';
import { failureCode, textOf } from '@keyflow/errors';
import type { TriggerDefinition } from '@keyflow/workflow';
import { TRIGGER_SOURCE_HEADERS, TriggerRecordError, type Applied } from './record';
import { markMessage } from './progress';
import type { Mark, SourcePartition } from './source-partition';

/**
 * What one transaction of a trigger partition writes: StartRun/SignalRun records to wf.requests, dead letters to the
 * trigger's DLQ, the partition's progress mark, and the group's offset (the mark's `next`), all or nothing (KIP-98).
 */
export class TriggerOutputs {
  readonly requests: Array<Msg & { topic: string }> = [];
  readonly dead: Array<Msg & { topic: string }> = [];
  /** Run ids this transaction starts (gates set on them are dropped when it fails). */
  readonly started: string[] = [];
  /** Records this transaction applies or dead-letters (what the counters count once it commits). */
  applied = 0;

  /**
   * @param maxMessageBytes KEYFLOW_MAX_MESSAGE_BYTES: a request record may be half of it (the claim check's threshold,
   *   as the engine's), a dead letter all of it (larger ones go as a stand-in without their value)
   */
  constructor(
    private readonly def: TriggerDefinition,
    private readonly codec: EventCodec,
    private readonly group: string,
    private readonly maxMessageBytes: number,
    /** wf.requests' partition count: each request names its partition (the Java client's rule over the run id). */
    private readonly requestPartitions: number,
  ) {}

  /** Bytes one produce request of the transaction may carry per split (half of max.message.bytes). */
  get requestBytes(): number {
    return Math.floor(this.maxMessageBytes / 2);
  }

  /**
   * A StartRun (key: run id) or SignalRun (key: run id) for the record `m`; its event id is derived from `m`.
   * @throws TriggerRecordError PAYLOAD_TOO_LARGE when the request would be over half of KEYFLOW_MAX_MESSAGE_BYTES
   *   (nothing is added: the caller dead-letters the record)
   */
  apply(m: ConsumedMessage, a: Applied, runId: string): void {
    const msg = this.request(m, a, runId);
    const bytes = messageBytes(msg);
    if (bytes > this.requestBytes)
      throw new TriggerRecordError(
        'PAYLOAD_TOO_LARGE',
        `its ${a.kind === 'start' ? 'StartRun' : 'SignalRun'} would be ${bytes} bytes, over half of KEYFLOW_MAX_MESSAGE_BYTES (${this.requestBytes})`,
      );
    this.requests.push(msg);
    if (a.kind === 'start') this.started.push(runId);
    this.applied++;
  }

  private request(m: ConsumedMessage, a: Applied, runId: string): Msg & { topic: string } {
    const metadata = {
      key: runId,
      correlationId: runId,
      eventId: derivedEventId(`${this.group}/${m.topic}/${m.partition}`, m.offset),
    };
    const value =
      a.kind === 'start'
        ? this.codec.encode(Topic.WF_REQUESTS, 'StartRun', {
            metadata: newMetadata('StartRun', metadata),
            runId,
            workflow: a.workflow.name,
            workflowVersion: a.workflow.version,
            businessKey: a.businessKey,
            input: JSON.stringify(a.input),
            idempotencyKey: null,
            trigger: `topic:${this.def.name}`,
            parent: null,
          })
        : this.codec.encode(Topic.WF_REQUESTS, 'SignalRun', {
            metadata: newMetadata('SignalRun', metadata),
            runId,
            signal: a.signal,
            payload: JSON.stringify(a.payload ?? null),
          });
    return {
      topic: this.codec.physical(Topic.WF_REQUESTS),
      key: runId,
      value,
      headers: pick(m, ['traceparent', 'tracestate']),
      // Named here (the Java client's rule over the run id): the mark counts the requests per wf.requests partition.
      partition: keyPartition(runId, this.requestPartitions),
    };
  }

  /**
   * The record to the trigger's DLQ with triage headers and where it came from (kept by a redrive). Its
   * x-dlq-original-topic is the trigger's own topic `trigger.<name>`: the one topic a redrive may send it to (libs/ops
   * catalogDlqSource), never the team's source topic, which the x-keyflow-trigger-source-* headers name.
   */
  deadLetter(m: ConsumedMessage, err: unknown, at: number): void {
    const source = m.headers?.[TRIGGER_SOURCE_HEADERS.topic]
      ? {}
      : {
          [TRIGGER_SOURCE_HEADERS.topic]: m.topic,
          [TRIGGER_SOURCE_HEADERS.partition]: String(m.partition),
          [TRIGGER_SOURCE_HEADERS.offset]: m.offset,
          [TRIGGER_SOURCE_HEADERS.timestamp]: m.timestamp,
        };
    // x-dlq-original-topic names the trigger's own topic: the one place a redrive may send it (never the team's
    // source topic, whose other readers would see a duplicate); the source is in the x-keyflow-trigger-source-*.
    const redriveTo = this.codec.physical(triggerTopic(this.def.name));
    const d = dlqMessage(
      { ...m, topic: redriveTo, headers: { ...m.headers, ...source } },
      {
        errorClass: (err as Error)?.constructor?.name ?? 'Error',
        errorMessage: textOf(err),
        errorCode: failureCode(err) ?? null,
        attempts: 1,
        firstFailureAt: at,
        lastFailureAt: at,
        consumerGroup: this.group,
      },
    );
    const topic = this.codec.physical(dlqOf(triggerTopic(this.def.name)));
    const bytes = messageBytes(d);
    // The DLQ takes twice max.message.bytes; a source record larger than keyflow's limit goes as a stand-in.
    this.dead.push({
      topic,
      ...(bytes > this.maxMessageBytes ? dlqStandIn(d, new RecordTooLargeError(topic, bytes)) : d),
    });
  }
}

function pick(m: ConsumedMessage, names: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const n of names) {
    const v = m.headers?.[n];
    if (v !== undefined && v !== null) out[n] = (Array.isArray(v) ? v.at(-1) : v)!.toString();
  }
  return out;
}

/**
 * The transactional producer of one trigger partition: transactional.id `<group>-<topic>-<partition>`, so the next
 * owner's InitProducerId fences this one (the pre-KIP-447 pattern the engine uses too).
 */
export function partitionProducer(kafka: Kafka, group: string, topic: string, partition: number): Producer {
  return kafka.producer({
    transactionalId: `${group}-${topic}-${partition}`,
    createPartitioner: JavaCompatiblePartitioner, // murmur2 as Java: a run id lands where the engine owns it
    idempotent: true,
    maxInFlightRequests: 1,
    transactionTimeout: 30_000,
    retry: TRANSACTIONAL_RETRY,
  });
}

/**
 * Commits `out`, the partition's mark and the group's offset (the mark's `next`) in one transaction of `producer`:
 * the requests and dead letters first (their wf.requests offsets go into the mark: `part.wrote`), then the mark.
 * @returns the mark committed
 * @throws what the producer throws (the transaction is aborted first): the caller reads the partition again from
 *   its last committed mark
 */
export async function commitTrigger<R>(
  producer: Producer,
  codec: EventCodec,
  at: { trigger: string; group: string; topic: string; partition: number },
  out: TriggerOutputs,
  part: SourcePartition<R>,
): Promise<Mark> {
  const tx = await producer.transaction();
  try {
    const requestsTopic = codec.physical(Topic.WF_REQUESTS);
    const byTopic = new Map<string, Msg[]>();
    for (const m of [...out.requests, ...out.dead]) {
      const { topic, ...msg } = m;
      const list = byTopic.get(topic);
      if (list) list.push(msg);
      else byTopic.set(topic, [msg]);
    }
    // Requests of at most half of max.message.bytes, so no partition's record batch is refused as too large.
    for (const { topicMessages: split, bytes } of splitBySize([...byTopic], out.requestBytes)) {
      const written = await tx.sendBatch({
        compression: writeCompression(CompressionTypes.GZIP, bytes),
        topicMessages: split,
      });
      // Each request names its partition (keyPartition of its run id), so the count per partition is known.
      const counts = new Map<number, number>();
      for (const m of split.find((t) => t.topic === requestsTopic)?.messages ?? [])
        counts.set(m.partition!, (counts.get(m.partition!) ?? 0) + 1);
      for (const w of written)
        if (w.topicName === requestsTopic && w.baseOffset !== undefined)
          part.wrote(w.partition, BigInt(w.baseOffset) + BigInt((counts.get(w.partition) ?? 1) - 1));
    }
    const mark = part.mark();
    const { topic: markTopic, ...markMsg } = markMessage(codec, at, mark);
    await tx.send({
      topic: markTopic,
      compression: writeCompression(CompressionTypes.GZIP, messageBytes(markMsg)),
      messages: [markMsg],
    });
    await whileTransactionsConcurrent(() =>
      tx.sendOffsets({
        consumerGroupId: at.group,
        topics: [
          { topic: at.topic, partitions: [{ partition: at.partition, offset: mark.next.toString() }] },
        ],
      }),
    );
    await tx.commit();
    return mark;
  } catch (err) {
    await tx.abort().catch(() => undefined);
    throw err;
  }
}
