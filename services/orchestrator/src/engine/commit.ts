import { Topic } from '@keyflow/schemas';
import {
  CompressionTypes,
  KafkaJSError,
  messageBytes,
  sendOffsetsFirst,
  sendWithOffsets,
  writeCompression,
  type IHeaders,
} from '@keyflow/kafka';
import { dlqLimitBytes, dlqMessage, dlqTopicFor, fitDlqRecord } from '@keyflow/ops';
import type { ClaimCheck } from '@keyflow/blobs';
import type { EventCodec } from '@keyflow/contracts';
import { KeyflowError } from '@keyflow/errors';
import { ROOT_CONTEXT, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { tracer, type Logger } from '@keyflow/observability';
import type { OrchestratorConfig } from '../config';
import type { OutputRecord } from './mapping';
import { ENGINE_TRANSACTION_TIMEOUT_MS, type OwnedPartition } from './ownership';

/**
 * The commit of an engine batch: ONE Kafka transaction of the partition's fenced producer, opened before the batch is
 * applied with the consumer offsets sent at once (sendOffsets), then the batch's outputs (commands, lifecycle events,
 * the last snapshot of each run) and its dead letters (fitted to their DLQs), then EndTxn. See
 * docs/architecture/engine.md.
 */

/** A record as the producer sends it. */
export type Msg = {
  key: string | Buffer | null;
  value: Buffer | null;
  headers?: IHeaders;
  partition?: number;
};

/** A record of the engine's input topics as the batch loop reads it: fetched, or a parked input's (parked.ts). */
export type InputRecord = {
  key: Buffer | null;
  value: Buffer | null;
  offset: string;
  headers?: IHeaders;
};

/** An input to dead-letter, to the DLQ of `topic` (physical: the batch's, or a parked input's own). */
export interface DeadLetter {
  m: InputRecord;
  err: Error;
  topic: string;
}

/** What an applied batch commits. */
export interface BatchOutputs {
  /** Commands, lifecycle events and snapshots, in order (only the last snapshot of a run is sent). */
  records: OutputRecord[];
  dlq: DeadLetter[];
  /** Runs whose wf.state records are tombstoned (parked StartRuns' runs whose start was dead-lettered). */
  removed: Iterable<string>;
}

/** What the commit needs of the engine. */
export interface CommitDeps {
  cfg: OrchestratorConfig;
  codec: EventCodec;
  claim: ClaimCheck;
  logger: Logger;
  /** Takes the partition over again (a failed commit or abort can leave the kafkajs producer unusable). */
  retakeOver(o: OwnedPartition, err: unknown): void;
}

/** Runs of DLQ records of one DLQ topic in one compression codec, in order. */
type Fitted = Array<{ dlqTopic: string; compression: CompressionTypes; records: Msg[] }>;

/** The open transaction of a batch: opened before the batch is applied, its offsets already on their way. */
export interface BatchTransaction {
  tx: Transaction;
  /** The batch's offsets (AddOffsetsToTxn, TxnOffsetCommit), sent at the open (sendOffsetsFirst). */
  offsets: Promise<unknown>;
  span: Span;
  /** When it was opened (performance.now(), ms). */
  openedAt: number;
  /** Fires at half of ENGINE_TRANSACTION_TIMEOUT_MS while the apply runs: gives the transaction up (`expired`). */
  timer: NodeJS.Timeout;
  /** Set when the timer gave the transaction up: its abort (sent once its offsets settled). */
  expired?: Promise<void>;
}

type Transaction = Awaited<ReturnType<OwnedPartition['producer']['transaction']>>;

/**
 * Opens the transaction of a batch of partition `o` before the batch is applied, and sends its offsets (past
 * `lastOffset`) at once: their AddOffsetsToTxn and TxnOffsetCommit overlap the apply, and after it only the records'
 * AddPartitionsToTxn, their produce and EndTxn remain (one round trip fewer than offsets sent beside the records).
 * An apply still running at half of {@link ENGINE_TRANSACTION_TIMEOUT_MS} (a slow blob store or registry) has the
 * transaction aborted then, before the coordinator would time it out and fence the producer; {@link stillFresh}
 * opens another for the commit. Then {@link commitBatch}, after {@link stillFresh}; or, when the apply throws,
 * {@link abandonBatch}.
 * @throws KafkaJSError (always retriable) when the transaction cannot open: the partition is taken over again
 */
export async function openBatch(
  o: OwnedPartition,
  d: CommitDeps,
  batch: { topic: string; partition: number },
  lastOffset: string,
  parent: Span,
): Promise<BatchTransaction> {
  const span = tracer().startSpan('keyflow.engine.transaction', {}, trace.setSpan(ROOT_CONTEXT, parent));
  const openedAt = performance.now();
  let tx: Transaction;
  try {
    tx = await o.producer.transaction();
  } catch (err) {
    throw transactionFailed(o, d, batch, span, err);
  }
  const next = (BigInt(lastOffset) + 1n).toString();
  // Right after the previous commit the coordinator may refuse the transaction's first request with
  // CONCURRENT_TRANSACTIONS: sendOffsetsFirst sends it again.
  const offsets = sendOffsetsFirst(() =>
    tx.sendOffsets({
      consumerGroupId: d.cfg.ORCHESTRATOR_GROUP_ID,
      topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: next }] }],
    }),
  );
  const open: BatchTransaction = { tx, offsets, span, openedAt, timer: undefined! };
  open.timer = setTimeout(() => {
    open.expired = abortAfterOffsets(open);
    open.expired.catch(() => undefined); // awaited by stillFresh or abandonBatch
  }, ENGINE_TRANSACTION_TIMEOUT_MS / 2);
  open.timer.unref();
  return open;
}

/**
 * The batch's transaction to commit in, after its apply: `open` itself, or, when its timer gave it up (the apply ran
 * past half of {@link ENGINE_TRANSACTION_TIMEOUT_MS}), a new one (offsets sent again). Either way its timer is
 * stopped: nothing aborts it under the commit.
 * @throws KafkaJSError (always retriable) when the expired transaction's abort failed (the partition is taken over
 *   again), or as {@link openBatch}
 */
export async function stillFresh(
  o: OwnedPartition,
  d: CommitDeps,
  open: BatchTransaction,
  batch: { topic: string; partition: number },
  lastOffset: string,
  parent: Span,
): Promise<BatchTransaction> {
  clearTimeout(open.timer);
  if (!open.expired) return open;
  const ms = Math.round(performance.now() - open.openedAt);
  d.logger.info(
    { topic: batch.topic, partition: batch.partition, ms },
    "the batch's apply took over half the transaction timeout: its transaction was aborted, another is opened for the commit",
  );
  open.span.setAttribute('keyflow.transaction.expired', true);
  open.span.end();
  await abortSettled(o, d, open.expired);
  const fresh = await openBatch(o, d, batch, lastOffset, parent);
  clearTimeout(fresh.timer);
  return fresh;
}

/**
 * Gives up the transaction of a batch whose apply threw `err`: aborted once its offsets' requests settled (so no
 * TxnOffsetCommit is in flight when the abort's EndTxn goes out; the abort its timer sent, if it fired), so nothing of
 * it commits and the batch is fetched again.
 * @throws KafkaJSError (retriable) when the abort fails: the partition is taken over again (the kafkajs producer may be
 *   unusable), and the batch must not be applied again on it
 */
export async function abandonBatch(
  o: OwnedPartition,
  d: CommitDeps,
  open: BatchTransaction,
  err: unknown,
): Promise<void> {
  clearTimeout(open.timer);
  open.span.recordException(err as Error);
  open.span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
  open.span.end();
  await abortSettled(o, d, open.expired ?? abortAfterOffsets(open));
}

/**
 * Aborts `open` once its offsets' requests settled: the patched abort waits for the transaction coordinator's
 * requests, not for the TxnOffsetCommit (to the group coordinator), which must not be in flight under the EndTxn.
 */
function abortAfterOffsets(open: BatchTransaction): Promise<void> {
  return open.offsets.catch(() => undefined).then(() => open.tx.abort());
}

/** Waits for a batch transaction's abort; one that failed takes the partition over again and is thrown on, retriable. */
async function abortSettled(o: OwnedPartition, d: CommitDeps, abort: Promise<void>): Promise<void> {
  try {
    await abort;
  } catch (abortErr) {
    d.logger.warn({ err: abortErr, partition: o.partition }, 'a batch transaction could not be aborted');
    d.retakeOver(o, abortErr);
    throw abortErr instanceof KafkaJSError && abortErr.retriable
      ? abortErr
      : new KafkaJSError(abortErr as Error, { retriable: true });
  }
}

/**
 * Commits a batch of partition `o` in its transaction (opened by {@link openBatch}, its offsets sent): outputs, dead
 * letters, then EndTxn.
 * @throws KafkaJSError (always retriable) when the transaction fails: it is aborted and the partition taken over again;
 *   nothing was resolved, so the batch is fetched again
 */
export async function commitBatch(
  o: OwnedPartition,
  d: CommitDeps,
  open: BatchTransaction,
  batch: { topic: string; partition: number },
  out: BatchOutputs,
): Promise<void> {
  const { tx, span: txSpan } = open;
  clearTimeout(open.timer); // stopped by stillFresh already: nothing may abort the transaction under its commit
  txSpan.setAttribute('keyflow.records', out.records.length + out.dlq.length);
  try {
    // Fitted before the records are sent: measuring a large record takes a while.
    const { fitted, elsewhere } = await fitDeadLetters(d.cfg, batch, out.dlq);
    const byTopic = outputMessages(d.codec.physical(Topic.WF_STATE), o.partition, out);
    // Requests of at most half of max.message.bytes (before gzip; KEYFLOW_MAX_MESSAGE_BYTES), so no record batch
    // exceeds what the broker accepts.
    const sends = splitBySize([...byTopic], d.claim.thresholdBytes).map(
      ({ topicMessages, bytes }) =>
        () =>
          tx.sendBatch({ compression: writeCompression(CompressionTypes.GZIP, bytes), topicMessages }),
    );
    for (const { dlqTopic, compression, records } of [...fitted, ...elsewhere])
      for (const { topicMessages } of splitBySize([[dlqTopic, records]], d.claim.thresholdBytes))
        sends.push(() => tx.sendBatch({ compression, topicMessages }));
    await sendWithOffsets(sends, open.offsets);
    await tx.commit();
    txSpan.end();
  } catch (err) {
    await abortAfterOffsets(open).catch(() => undefined);
    throw transactionFailed(o, d, batch, txSpan, err);
  }
}

/**
 * Ends a failed transaction's span, logs, takes the partition over again, and gives the error to throw on: retriable.
 * Nothing was resolved, so the batch is fetched again. kafkajs crashes its consumer for good (no restart) on an error
 * that is not retriable, such as a fenced producer's INVALID_PRODUCER_EPOCH when the partition's next owner took over
 * first: the error goes on as retriable (kafkajs retries the batch, then rejoins the group).
 */
function transactionFailed(
  o: OwnedPartition,
  d: CommitDeps,
  batch: { topic: string; partition: number },
  txSpan: Span,
  err: unknown,
): KafkaJSError {
  txSpan.recordException(err as Error);
  txSpan.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
  txSpan.end();
  d.logger.warn(
    { err, topic: batch.topic, partition: batch.partition },
    'transaction aborted; the batch will be redelivered',
  );
  d.retakeOver(o, err); // a failed commit or abort can leave the kafkajs producer unusable
  return err instanceof KafkaJSError && err.retriable
    ? err
    : new KafkaJSError(err as Error, { retriable: true });
}

/**
 * The batch's outputs by topic, in order: within one transaction only the last snapshot of a run matters (earlier
 * ones are superseded at once), then a tombstone for each removed run.
 */
function outputMessages(snapshotTopic: string, partition: number, out: BatchOutputs): Map<string, Msg[]> {
  const byTopic = new Map<string, Msg[]>();
  const lastSnapshot = new Map<string, number>();
  out.records.forEach((r, i) => r.topic === snapshotTopic && lastSnapshot.set(r.key, i));
  const add = (topic: string, m: Msg) => {
    const messages = byTopic.get(topic);
    if (messages) messages.push(m);
    else byTopic.set(topic, [m]);
  };
  out.records.forEach((r, i) => {
    if (r.topic === snapshotTopic && lastSnapshot.get(r.key) !== i) return;
    add(r.topic, { key: r.key, value: r.value, partition: r.partition, headers: r.headers });
  });
  for (const key of out.removed) add(snapshotTopic, { key, value: null, partition });
  return byTopic;
}

/**
 * The dead letters as DLQ records, in order, each in the codec measured to fit its DLQ (fitDlqRecord, against twice
 * KEYFLOW_MAX_MESSAGE_BYTES plus headroom, the limit DLQs are created with): gzip, or zstd for one that gzip does not
 * bring under (it came compressed by its producer, zstd from librdkafka or Java, which may shrink repeats further
 * apart than gzip's 32 KiB window), or a stand-in without its value when no codec does (a few KB of zstd may hold
 * more than any request carries). `fitted` goes to the batch topic's DLQ; `elsewhere` holds parked inputs' records
 * of the other input topic (a parked result dead-lettered in a requests batch).
 */
async function fitDeadLetters(
  cfg: OrchestratorConfig,
  batch: { topic: string; partition: number },
  dlq: DeadLetter[],
): Promise<{ fitted: Fitted; elsewhere: Fitted }> {
  const dlqTopic = dlqTopicFor(batch.topic);
  const fitted: Fitted = [];
  const elsewhere: Fitted = [];
  for (const dead of dlq.map((x) => deadLetterRecord(cfg, batch.partition, x))) {
    const { record, compression } = await fitDlqRecord(
      dead.record,
      dead.dlqTopic,
      dlqLimitBytes(cfg.KEYFLOW_MAX_MESSAGE_BYTES),
    );
    const into = dead.dlqTopic === dlqTopic ? fitted : elsewhere;
    const run = into.at(-1);
    if (run?.compression === compression && run.dlqTopic === dead.dlqTopic) run.records.push(record);
    else into.push({ dlqTopic: dead.dlqTopic, compression, records: [record] });
  }
  return { fitted, elsewhere };
}

/** A dead letter as its DLQ record (triage headers: the error, one attempt, now) and the DLQ it goes to. */
function deadLetterRecord(
  cfg: OrchestratorConfig,
  partition: number,
  { m, err, topic }: DeadLetter,
): { record: ReturnType<typeof dlqMessage>; dlqTopic: string } {
  const now = Date.now();
  const record = dlqMessage(
    {
      topic,
      partition,
      offset: m.offset,
      key: m.key ?? null,
      value: m.value ?? null,
      headers: m.headers ?? {},
    },
    {
      errorClass: err.name,
      errorMessage: err.message,
      errorCode: err instanceof KeyflowError ? err.code : null,
      attempts: 1,
      firstFailureAt: now,
      lastFailureAt: now,
      consumerGroup: cfg.ORCHESTRATOR_GROUP_ID,
    },
    cfg.ORCHESTRATOR_INSTANCE_ID,
  );
  return { record, dlqTopic: dlqTopicFor(topic) };
}

/** One request's records by topic, in order, and their size in bytes as {@link messageBytes} counts them. */
export interface SizedRequest {
  topicMessages: Array<{ topic: string; messages: Msg[] }>;
  bytes: number;
}

/**
 * Splits messages into requests of at most `maxBytes` as {@link messageBytes} counts them (key, value, headers and the
 * record's overhead); a larger single message goes alone. The engine gives half of max.message.bytes (the claim
 * check's threshold), so no partition's record batch in one request can exceed it. Each request carries its size
 * (what writeCompression weighs).
 */
export function splitBySize(byTopic: Array<[string, Msg[]]>, maxBytes: number): SizedRequest[] {
  const parts: SizedRequest[] = [];
  let current: SizedRequest = { topicMessages: [], bytes: 0 };
  for (const [topic, messages] of byTopic) {
    for (const m of messages) {
      const bytes = messageBytes(m);
      if (current.bytes > 0 && current.bytes + bytes > maxBytes) {
        parts.push(current);
        current = { topicMessages: [], bytes: 0 };
      }
      const last = current.topicMessages.at(-1);
      if (last?.topic === topic) last.messages.push(m);
      else current.topicMessages.push({ topic, messages: [m] });
      current.bytes += bytes;
    }
  }
  if (current.topicMessages.length) parts.push(current);
  return parts;
}
