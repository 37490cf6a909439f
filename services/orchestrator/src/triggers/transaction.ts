import { Topic, triggerTopic, dlqOf } from '@keyflow/schemas';
import {
  CompressionTypes,
  JavaCompatiblePartitioner,
  TRANSACTIONAL_RETRY,
  whileTransactionsConcurrent,
  writeCompression,
  type ConsumedMessage,
  type Kafka,
  type Message,
  type Producer,
} from '@keyflow/kafka';
import { derivedEventId, newMetadata, type EventCodec } from '@keyflow/contracts';
import { dlqMessage } from '@keyflow/ops';
import { failureCode, textOf } from '@keyflow/errors';
import type { TriggerDefinition } from '@keyflow/workflow';
import { TRIGGER_SOURCE_HEADERS, type Applied } from './record';
import { markMessage } from './progress';
import type { Mark } from './source-partition';

/**
 * What one transaction of a trigger partition writes: StartRun/SignalRun records to wf.requests, dead letters to the
 * trigger's DLQ, the partition's progress mark, and the group's offset (the mark's `next`), all or nothing (KIP-98).
 */
export class TriggerOutputs {
  readonly requests: Array<Message & { topic: string }> = [];
  readonly dead: Array<Message & { topic: string }> = [];
  /** Run ids this transaction starts (gates set on them are dropped when it fails). */
  readonly started: string[] = [];
  /** Records this transaction applies or dead-letters (what the counters count once it commits). */
  applied = 0;

  constructor(
    private readonly def: TriggerDefinition,
    private readonly codec: EventCodec,
    private readonly group: string,
  ) {}

  /** A StartRun (key: run id) or SignalRun (key: run id) for the record `m`; its event id is derived from `m`. */
  apply(m: ConsumedMessage, a: Applied, runId: string): void {
    const eventId = derivedEventId(`${this.group}/${m.topic}/${m.partition}`, m.offset);
    const topic = this.codec.physical(Topic.WF_REQUESTS);
    const traceHeaders = pick(m, ['traceparent', 'tracestate']);
    if (a.kind === 'start') {
      const value = this.codec.encode(Topic.WF_REQUESTS, 'StartRun', {
        metadata: newMetadata('StartRun', { key: runId, correlationId: runId, eventId }),
        runId,
        workflow: a.workflow.name,
        workflowVersion: a.workflow.version,
        businessKey: a.businessKey,
        input: JSON.stringify(a.input),
        idempotencyKey: null,
        trigger: `topic:${this.def.name}`,
      });
      this.requests.push({ topic, key: runId, value, headers: traceHeaders });
      this.started.push(runId);
    } else {
      const value = this.codec.encode(Topic.WF_REQUESTS, 'SignalRun', {
        metadata: newMetadata('SignalRun', { key: runId, correlationId: runId, eventId }),
        runId,
        signal: a.signal,
        payload: JSON.stringify(a.payload ?? null),
      });
      this.requests.push({ topic, key: runId, value, headers: traceHeaders });
    }
    this.applied++;
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
    const d = dlqMessage(
      { ...m, topic: this.codec.physical(triggerTopic(this.def.name)), headers: { ...m.headers, ...source } },
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
    this.dead.push({ topic: this.codec.physical(dlqOf(triggerTopic(this.def.name))), ...d });
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
 * Commits `out`, the partition's `mark` and the group's offset (`mark.next`) in one transaction of `producer`.
 * @throws what the producer throws (the transaction is aborted first): the caller reads the partition again from
 *   its last committed mark
 */
export async function commitTrigger(
  producer: Producer,
  codec: EventCodec,
  at: { trigger: string; group: string; topic: string; partition: number },
  out: TriggerOutputs,
  mark: Mark,
): Promise<void> {
  const tx = await producer.transaction();
  try {
    const byTopic = new Map<string, Message[]>();
    for (const m of [...out.requests, ...out.dead, markMessage(codec, at, mark)]) {
      const { topic, ...msg } = m;
      const list = byTopic.get(topic);
      if (list) list.push(msg);
      else byTopic.set(topic, [msg]);
    }
    await tx.sendBatch({
      compression: writeCompression(CompressionTypes.GZIP),
      topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })),
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
  } catch (err) {
    await tx.abort().catch(() => undefined);
    throw err;
  }
}
