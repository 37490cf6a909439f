import { hostname } from 'node:os';
import type { IHeaders, Kafka, KafkaMessage, Producer } from 'kafkajs';
import type { Logger } from '@keyflow/observability';
import type { ConsumedMessage } from './ordered-consumer';

import {
  ensureDlqLedger,
  handledEntryOf,
  ledgerMessage,
  readDlqLedger,
  type DlqAction,
  type LedgerCodec,
} from './dlq-ledger';
import { lastStableOffsets, scanRanges } from './scan';

/** Triage headers on every DLQ record (values are UTF-8 strings; times are ms since epoch). */
export const DLQ_HEADERS = {
  originalTopic: 'x-dlq-original-topic',
  originalPartition: 'x-dlq-original-partition',
  originalOffset: 'x-dlq-original-offset',
  errorClass: 'x-dlq-error-class',
  errorMessage: 'x-dlq-error-message',
  /** The error's machine-readable code, when it has one (e.g. INPUT_SCHEMA, DUPLICATE_COLUMN). */
  errorCode: 'x-dlq-error-code',
  attempts: 'x-dlq-attempts',
  firstFailureAt: 'x-dlq-first-failure-at',
  lastFailureAt: 'x-dlq-last-failure-at',
  consumerGroup: 'x-dlq-consumer-group',
  host: 'x-dlq-host',
  redriveCount: 'x-dlq-redrive-count',
} as const;

const OURS = new Set<string>(Object.values(DLQ_HEADERS));

export interface DeadLetter {
  errorClass: string;
  errorMessage: string;
  /** The error's `code`, when it has one: written as x-dlq-error-code. */
  errorCode?: string | null;
  attempts: number;
  firstFailureAt: number;
  lastFailureAt: number;
  consumerGroup: string;
}

/** Ledger key and in-memory id of a DLQ record: `<physical dlq topic>/<partition>/<offset>`. */
export const dlqRecordId = (physicalDlqTopic: string, partition: number, offset: string) =>
  `${physicalDlqTopic}/${partition}/${offset}`;

/** `task.extract` -> `task.extract.dlq`. */
export const dlqTopicFor = (topic: string) => `${topic}.dlq`;

export function header(headers: IHeaders | undefined, name: string): string | undefined {
  const v = headers?.[name];
  if (v === undefined || v === null) return undefined;
  return Array.isArray(v) ? v.at(-1)?.toString() : v.toString();
}

/**
 * The DLQ record for a message: original key and bytes, original headers (trace context, earlier redrive count) and
 * the triage headers. `host` names the process that gave up on it (default `<hostname>/<pid>`).
 */
export function dlqMessage(
  m: Pick<ConsumedMessage, 'topic' | 'partition' | 'offset' | 'key' | 'value' | 'headers'>,
  dl: DeadLetter,
  host = `${hostname()}/${process.pid}`,
): { key: Buffer | null; value: Buffer | null; headers: IHeaders } {
  const headers: IHeaders = {
    ...m.headers,
    [DLQ_HEADERS.originalTopic]: m.topic,
    [DLQ_HEADERS.originalPartition]: String(m.partition),
    [DLQ_HEADERS.originalOffset]: m.offset,
    [DLQ_HEADERS.errorClass]: dl.errorClass,
    [DLQ_HEADERS.errorMessage]: dl.errorMessage.slice(0, 4_000),
    ...(dl.errorCode ? { [DLQ_HEADERS.errorCode]: dl.errorCode } : {}),
    [DLQ_HEADERS.attempts]: String(dl.attempts),
    [DLQ_HEADERS.firstFailureAt]: String(dl.firstFailureAt),
    [DLQ_HEADERS.lastFailureAt]: String(dl.lastFailureAt),
    [DLQ_HEADERS.consumerGroup]: dl.consumerGroup,
    [DLQ_HEADERS.host]: host,
  };
  return { key: m.key, value: m.value, headers };
}

/**
 * Publishes the original bytes and key to `<topic>.dlq` with triage headers (see {@link dlqMessage}). acks=all: it
 * returns only once the DLQ record is durable, so the caller may then commit past the original.
 */
export async function sendToDlq(producer: Producer, m: ConsumedMessage, dl: DeadLetter): Promise<void> {
  await producer.send({ topic: dlqTopicFor(m.topic), acks: -1, messages: [dlqMessage(m, dl)] });
}

export interface RedriveFilter {
  /** Only the records of this DLQ partition. */
  partition?: number;
  /** Only the record at this offset (with `partition`: one record). */
  offset?: string;
  /** Only records with this key. */
  key?: string;
  /** Only records whose error class is this. */
  errorClass?: string;
  /** Only records whose last failure is at or after / before these times (ms since epoch). */
  fromMs?: number;
  toMs?: number;
}

export interface RedriveReport {
  scanned: number;
  /** Records re-published, or discarded with `action: 'DISCARDED'` (with `dryRun`: that would be). */
  moved: number;
  /** Moved records per original topic. */
  byTopic: Record<string, number>;
  /** Records that did not match the filter. */
  skipped: number;
  /** Matching pending records a redrive cannot send: no x-dlq-original-topic header (discard them instead). */
  noOriginalTopic: number;
  /** Matching records the ledger says were handled before (left alone unless `includeHandled`). */
  alreadyHandled: number;
  dryRun: boolean;
  action: DlqAction;
}

/** Whether a DLQ record matches `filter` (by partition, offset, key, error class and last failure time). */
export function matchesRedriveFilter(
  m: Pick<KafkaMessage, 'key' | 'headers' | 'offset'>,
  filter: RedriveFilter,
  partition?: number,
): boolean {
  const h = m.headers ?? {};
  const last = Number(header(h, DLQ_HEADERS.lastFailureAt) ?? 0);
  return (
    (filter.partition === undefined || partition === filter.partition) &&
    (filter.offset === undefined || m.offset === filter.offset) &&
    (filter.key === undefined || m.key?.toString() === filter.key) &&
    (filter.errorClass === undefined || header(h, DLQ_HEADERS.errorClass) === filter.errorClass) &&
    (filter.fromMs === undefined || last >= filter.fromMs) &&
    (filter.toMs === undefined || last < filter.toMs)
  );
}

/**
 * Re-publishes the DLQ records that match `filter` to their original topic, with their original key, bytes
 * and headers (so the idempotency key inside the payload is kept), minus the triage headers, plus
 * `x-dlq-redrive-count`; with `action: 'DISCARDED'` sends nothing to the original topic. Each record acted on gets
 * a DlqRecordHandled entry in the DLQ ledger (libs/kafka dlq-ledger.ts) after its send, so it stops counting as
 * pending, and a later redrive leaves it alone unless `includeHandled`. Reads the DLQ (read_committed) from the
 * beginning up to its last stable offsets at the start of the call (`scanRanges`: transactional DLQs, such as the
 * orchestrator's wf.requests.dlq and task.results.dlq, hold markers and aborted records it passes over), at most
 * `ratePerSec` records per second, then returns. With `dryRun` nothing is sent: the report says what would be. A
 * crash between a record's send and its ledger entry leaves it pending: it may be redriven again, which the
 * idempotency layer makes safe.
 * @throws UndecodableBatchError (code UNDECODABLE_BATCH, naming the DLQ partition and offsets) when a record batch
 *   of the DLQ cannot be decompressed: nothing after it in that partition is moved; the codec's registry errors
 *   (ensureDlqLedger); whatever else the consumer or producer throws (kafkajs errors)
 */
export async function redrive(
  kafka: Kafka,
  opts: {
    dlqTopic: string;
    filter?: RedriveFilter;
    ratePerSec?: number;
    logger: Logger;
    producer: Producer;
    dryRun?: boolean;
    /** The ledger's codec and who acts (see {@link handledBy}). */
    ledger: { codec: LedgerCodec; handledBy: string; reason?: string };
    /** Default REDRIVEN. */
    action?: DlqAction;
    /** Also act on records the ledger says were handled before (default false). */
    includeHandled?: boolean;
    /** Act on at most this many records (the count an operator confirmed after a dry run); default no limit. */
    limit?: number;
  },
): Promise<RedriveReport> {
  const { dlqTopic, filter = {}, ratePerSec = 100, dryRun = false, action = 'REDRIVEN' } = opts;
  const { codec } = opts.ledger;
  if (!dryRun) await ensureDlqLedger(kafka, codec);
  const handled = await readDlqLedger(kafka, codec);
  const ends = await lastStableOffsets(kafka, dlqTopic);
  const report: RedriveReport = {
    scanned: 0,
    moved: 0,
    byTopic: {},
    skipped: 0,
    noOriginalTopic: 0,
    alreadyHandled: 0,
    dryRun,
    action,
  };
  const minGapMs = 1_000 / ratePerSec;
  let nextSendAt = Date.now();
  await scanRanges(
    kafka,
    ends.map((e) => ({ topic: dlqTopic, partition: e.partition, from: e.low, to: e.end })),
    async (_topic, partition, message) => {
      report.scanned++;
      const h = message.headers ?? {};
      const original = header(h, DLQ_HEADERS.originalTopic);
      if (!matchesRedriveFilter(message, filter, partition)) {
        report.skipped++;
        return;
      }
      if (!opts.includeHandled && handledEntryOf(handled, dlqTopic, partition, message)) {
        report.alreadyHandled++;
        return;
      }
      if (!original && action === 'REDRIVEN') {
        report.noOriginalTopic++;
        return;
      }
      if (opts.limit !== undefined && report.moved >= opts.limit) return false;
      if (!dryRun) {
        const wait = nextSendAt - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        nextSendAt = Math.max(Date.now(), nextSendAt) + minGapMs;
        if (action === 'REDRIVEN') {
          const kept: IHeaders = Object.fromEntries(Object.entries(h).filter(([k]) => !OURS.has(k)));
          kept[DLQ_HEADERS.redriveCount] = String(Number(header(h, DLQ_HEADERS.redriveCount) ?? 0) + 1);
          await opts.producer.send({
            topic: original!,
            acks: -1,
            messages: [{ key: message.key, value: message.value, headers: kept }],
          });
        }
        const { topic, ...entry } = ledgerMessage(codec, {
          dlqTopic,
          partition,
          offset: message.offset,
          recordTimestamp: Number(message.timestamp),
          action,
          originalTopic: action === 'REDRIVEN' ? original : null,
          handledBy: opts.ledger.handledBy,
          reason: opts.ledger.reason,
        });
        await opts.producer.send({ topic, acks: -1, messages: [entry] });
      }
      report.moved++;
      const to = action === 'REDRIVEN' ? original! : '(discarded)';
      report.byTopic[to] = (report.byTopic[to] ?? 0) + 1;
    },
    { groupPrefix: 'keyflow-redrive' },
  );
  opts.logger.info({ dlqTopic, filter, ...report }, dryRun ? 'redrive dry run finished' : 'redrive finished');
  return report;
}
