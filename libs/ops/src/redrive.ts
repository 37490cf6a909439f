import type { IHeaders, Kafka, KafkaMessage, Producer } from '@keyflow/kafka';
import { isTooLarge } from '@keyflow/kafka';
import type { Logger } from '@keyflow/observability';
import { catalogDlqSource } from './catalog';
import { sendWithinLimit } from './dlq';
import { DLQ_HEADERS, header, isOffsetText, OURS } from './dlq-headers';
import {
  ensureDlqLedger,
  handledEntryOf,
  ledgerMessage,
  DlqLedgerView,
  type DlqAction,
  type HandledEntry,
  type LedgerCodec,
} from './dlq-ledger';
import { lastStableOffsets, scanRanges } from './scan';

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
  /**
   * Matching records their original topic refused as larger than its max.message.bytes, also compressed and without
   * the x-dlq-redrive-count header (a record at its topic's limit goes back without it): left pending (raise the
   * topic's limit, then redrive again), the redrive goes on with the next record.
   */
  tooLarge: number;
  /**
   * Matching stand-in records (header x-dlq-omitted: no request could carry the original, see sendToDlq): there is
   * nothing to send back, so a redrive leaves them pending (discard them once the original is dealt with).
   */
  omitted: number;
  /**
   * Matching pending records a redrive refused (left pending, see {@link RedriveRefusal}): one naming a topic other
   * than its DLQ's source, or one the caller's `admit` check refused (a task command of a run that ended).
   */
  refused: number;
  /** The refused records, each with its reason (the first {@link REPORT_RECORDS_MAX}). */
  refusals: RedriveRefusal[];
  /** The records re-published (with `dryRun`: that would be), each with its topic (the first {@link REPORT_RECORDS_MAX}). */
  redriven: Array<{ partition: number; offset: string; key: string | null; topic: string }>;
  dryRun: boolean;
  action: DlqAction;
}

/** A DLQ record a redrive left pending, and why. */
export interface RedriveRefusal {
  partition: number;
  offset: string;
  key: string | null;
  /** NOT_OWN_SOURCE (its x-dlq-original-topic is not its DLQ's source topic), or the `admit` check's code. */
  code: string;
  reason: string;
}

/**
 * A caller's check of one matching pending DLQ record before it is redriven: undefined to send it, or the refusal's
 * code and reason (the record is then left pending and reported). Runs in dry runs too.
 */
export type RedriveAdmit = (
  message: KafkaMessage,
  at: { partition: number; originalTopic: string },
) => Promise<{ code: string; reason: string } | undefined>;

/** Longest list of records a {@link RedriveReport} names (its counts cover them all). */
export const REPORT_RECORDS_MAX = 100;

/** Refusal code of a DLQ record that names a topic other than its DLQ's source. */
export const NOT_OWN_SOURCE = 'NOT_OWN_SOURCE';

/**
 * Refusal code of a record of a DLQ whose source topic does not exist: a task type that only local steps run (the
 * orchestrator dead-letters their commands to `task.<type>.dlq`, and no `task.<type>` exists), or a source deleted
 * since. Sent, it would wait on kafkajs's metadata retries and fail, or create the topic on a broker that creates
 * topics on first use, where nothing reads it.
 */
export const SOURCE_TOPIC_MISSING = 'SOURCE_TOPIC_MISSING';

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
 * The ranges of a DLQ topic a scan for `filter` must read, from its partitions' offsets (`ends`, from
 * lastStableOffsets): with `filter.partition` that partition only, with `filter.offset` (a decimal offset) only that
 * offset of each partition left; a partition with nothing left is not in the answer. Other fields of the filter (key,
 * error class, times) are in the records' keys and headers, so every record of a partition is read for them.
 */
export function rangesFor(
  dlqTopic: string,
  ends: ReadonlyArray<{ partition: number; low: bigint; end: bigint }>,
  filter: RedriveFilter,
): Array<{ topic: string; partition: number; from: bigint; to: bigint }> {
  let at: bigint | undefined;
  if (filter.offset !== undefined) {
    // Not an offset at all: no record can match (matchesRedriveFilter compares the text).
    if (!isOffsetText(filter.offset)) return [];
    at = BigInt(filter.offset);
  }
  const ranges = [];
  for (const e of ends) {
    if (filter.partition !== undefined && e.partition !== filter.partition) continue;
    const from = at === undefined || at < e.low ? e.low : at;
    const to = at === undefined || at + 1n > e.end ? e.end : at + 1n;
    if (to > from) ranges.push({ topic: dlqTopic, partition: e.partition, from, to });
  }
  return ranges;
}

/** The options of {@link redrive}. */
export interface RedriveOptions {
  dlqTopic: string;
  filter?: RedriveFilter;
  ratePerSec?: number;
  logger: Logger;
  producer: Producer;
  dryRun?: boolean;
  /**
   * The ledger's codec and who acts (see {@link handledBy}); `view`: a process's own {@link DlqLedgerView}, read
   * from where it last read (default: the whole ledger read once).
   */
  ledger: { codec: LedgerCodec; handledBy: string; reason?: string; view?: DlqLedgerView };
  /** Default REDRIVEN. */
  action?: DlqAction;
  /** Also act on records the ledger says were handled before (default false). */
  includeHandled?: boolean;
  /** Act on at most this many records (the count an operator confirmed after a dry run); default no limit. */
  limit?: number;
  /** The caller's check of each record before it is redriven (see {@link RedriveAdmit}); default none. */
  admit?: RedriveAdmit;
}

/**
 * Re-publishes the DLQ records that match `filter` to their original topic, with their original key, bytes
 * and headers (so the idempotency key inside the payload is kept), minus the triage headers, plus
 * `x-dlq-redrive-count`; with `action: 'DISCARDED'` sends nothing to the original topic. A record is redriven only to
 * its DLQ's own source topic (`<topic>` of `<topic>.dlq`), only when that topic exists (SOURCE_TOPIC_MISSING), and
 * only when `admit` (if given) lets it: others are left pending and listed with their reason in the report's
 * `refusals`. Each record acted on gets
 * a DlqRecordHandled entry in the DLQ ledger (./dlq-ledger) after its send, so it stops counting as
 * pending, and a later redrive leaves it alone unless `includeHandled`. Reads the DLQ (read_committed) from the
 * beginning up to its last stable offsets at the start of the call, only the partition and offset the filter names
 * when it names them ({@link rangesFor}) (`scanRanges`: transactional DLQs, such as the
 * orchestrator's wf.requests.dlq and task.results.dlq, hold markers and aborted records it passes over), at most
 * `ratePerSec` records per second, then returns. With `dryRun` nothing is sent: the report says what would be. A
 * crash between a record's send and its ledger entry leaves it pending: it may be redriven again, which the
 * idempotency layer makes safe.
 * @throws UndecodableBatchError (code UNDECODABLE_BATCH, naming the DLQ partition and offsets) when a record batch
 *   of the DLQ cannot be decompressed: nothing after it in that partition is moved; the codec's registry errors
 *   (ensureDlqLedger); whatever else the consumer or producer throws (kafkajs errors)
 */
export async function redrive(kafka: Kafka, opts: RedriveOptions): Promise<RedriveReport> {
  const { dlqTopic, filter = {}, ratePerSec = 100, dryRun = false, action = 'REDRIVEN' } = opts;
  const { codec } = opts.ledger;
  if (!dryRun) await ensureDlqLedger(kafka, codec);
  const handled = await (opts.ledger.view ?? new DlqLedgerView(kafka, codec)).refresh();
  const source = catalogDlqSource(dlqTopic);
  // One admin connection for the DLQ's offsets and, to redrive, whether its source exists: the broker's topic list (a
  // metadata request for the topic alone could create it).
  const admin = kafka.admin();
  await admin.connect();
  let ends: Awaited<ReturnType<typeof lastStableOffsets>>;
  let sourceExists = true;
  try {
    ends = await lastStableOffsets(kafka, dlqTopic, admin);
    if (action === 'REDRIVEN') sourceExists = (await admin.listTopics()).includes(source);
  } finally {
    await admin.disconnect();
  }
  const run: RedriveRun = {
    opts,
    filter,
    dryRun,
    action,
    handled,
    source,
    sourceExists,
    report: emptyReport(dryRun, action),
    pace: pacer(ratePerSec),
  };
  await scanRanges(
    kafka,
    rangesFor(dlqTopic, ends, filter),
    (_topic, partition, message) => redriveRecord(run, partition, message),
    { groupPrefix: 'keyflow-redrive' },
  );
  opts.logger.info(
    { dlqTopic, filter, ...run.report },
    dryRun ? 'redrive dry run finished' : 'redrive finished',
  );
  return run.report;
}

/** One redrive's settings and state, shared by its steps. */
interface RedriveRun {
  opts: RedriveOptions;
  filter: RedriveFilter;
  dryRun: boolean;
  action: DlqAction;
  /** The DLQ ledger as it was at the start (see readDlqLedger). */
  handled: ReadonlyMap<string, HandledEntry>;
  /** The one topic this DLQ's records may go back to (physical name). */
  source: string;
  /** Whether `source` existed when the redrive began (looked up only to redrive). */
  sourceExists: boolean;
  report: RedriveReport;
  /** Waits until the next send keeps to `ratePerSec`. */
  pace: () => Promise<void>;
}

const emptyReport = (dryRun: boolean, action: DlqAction): RedriveReport => ({
  scanned: 0,
  moved: 0,
  byTopic: {},
  skipped: 0,
  noOriginalTopic: 0,
  alreadyHandled: 0,
  tooLarge: 0,
  omitted: 0,
  refused: 0,
  refusals: [],
  redriven: [],
  dryRun,
  action,
});

/** A wait before each send, so that sends start at most `ratePerSec` per second from now on. */
function pacer(ratePerSec: number): () => Promise<void> {
  const minGapMs = 1_000 / ratePerSec;
  let nextSendAt = Date.now();
  return async () => {
    const wait = nextSendAt - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    nextSendAt = Math.max(Date.now(), nextSendAt) + minGapMs;
  };
}

/**
 * One DLQ record of the scan: passed over, refused, or acted on (sent back and/or entered in the ledger) and counted.
 * @returns false to end the scan of its partition (the limit is reached)
 */
async function redriveRecord(
  run: RedriveRun,
  partition: number,
  message: KafkaMessage,
): Promise<void | boolean> {
  run.report.scanned++;
  const original = header(message.headers ?? {}, DLQ_HEADERS.originalTopic);
  if (passedOver(run, partition, message, original)) return;
  if (run.action === 'REDRIVEN') {
    // passedOver leaves no REDRIVEN record without an original topic.
    const verdict = await destinationCheck(run, partition, message, original!);
    if (verdict === 'limit') return false;
    if (verdict === 'refused') return;
  }
  if (limitReached(run)) return false;
  if (!run.dryRun && !(await act(run, partition, message, original))) return;
  countMoved(run, partition, message, original);
}

const limitReached = (run: RedriveRun): boolean =>
  run.opts.limit !== undefined && run.report.moved >= run.opts.limit;

/**
 * Whether the record is left alone before its destination is looked at, counting why: it does not match the filter,
 * the ledger says it was handled, or (to redrive) it names no original topic or is a stand-in without its value.
 */
function passedOver(
  run: RedriveRun,
  partition: number,
  message: KafkaMessage,
  original: string | undefined,
): boolean {
  const { report } = run;
  if (!matchesRedriveFilter(message, run.filter, partition)) {
    report.skipped++;
    return true;
  }
  if (!run.opts.includeHandled && handledEntryOf(run.handled, run.opts.dlqTopic, partition, message)) {
    report.alreadyHandled++;
    return true;
  }
  if (!original && run.action === 'REDRIVEN') {
    report.noOriginalTopic++;
    return true;
  }
  if (header(message.headers ?? {}, DLQ_HEADERS.omitted) !== undefined && run.action === 'REDRIVEN') {
    report.omitted++;
    return true;
  }
  return false;
}

/**
 * Whether a record may go back to `original`: only to its DLQ's own source topic (a header naming another, forged
 * or copied from elsewhere, would make the redrive write where this DLQ's deployment has no say), within the limit,
 * and when the caller's `admit` lets it. A refusal is reported.
 */
async function destinationCheck(
  run: RedriveRun,
  partition: number,
  message: KafkaMessage,
  original: string,
): Promise<'admitted' | 'refused' | 'limit'> {
  if (original !== run.source) {
    refuse(
      run.report,
      partition,
      message,
      NOT_OWN_SOURCE,
      `its x-dlq-original-topic names ${original}, not ${run.source}: a redrive sends only to its DLQ's own source topic`,
    );
    return 'refused';
  }
  if (!run.sourceExists) {
    refuse(
      run.report,
      partition,
      message,
      SOURCE_TOPIC_MISSING,
      `its topic ${original} does not exist (a task type only local steps run has none, or it was deleted): ` +
        'nothing would read it there; retry its run (POST /runs/:id/retry) or discard the record',
    );
    return 'refused';
  }
  if (limitReached(run)) return 'limit';
  const refusal = await run.opts.admit?.(message, { partition, originalTopic: original });
  if (!refusal) return 'admitted';
  refuse(run.report, partition, message, refusal.code, refusal.reason);
  return 'refused';
}

function refuse(
  report: RedriveReport,
  partition: number,
  message: KafkaMessage,
  code: string,
  reason: string,
): void {
  report.refused++;
  if (report.refusals.length < REPORT_RECORDS_MAX)
    report.refusals.push({
      partition,
      offset: message.offset,
      key: message.key?.toString() ?? null,
      code,
      reason,
    });
}

/**
 * Sends the record back (REDRIVEN) and then its ledger entry, at the redrive's pace.
 * @returns false when its original topic refused it as too large (left pending, see {@link sendBack})
 */
async function act(
  run: RedriveRun,
  partition: number,
  message: KafkaMessage,
  original: string | undefined,
): Promise<boolean> {
  await run.pace();
  if (run.action === 'REDRIVEN' && !(await sendBack(run, partition, message, original!))) return false;
  const { topic, ...entry } = ledgerMessage(run.opts.ledger.codec, {
    dlqTopic: run.opts.dlqTopic,
    partition,
    offset: message.offset,
    recordTimestamp: Number(message.timestamp),
    action: run.action,
    originalTopic: run.action === 'REDRIVEN' ? original : null,
    handledBy: run.opts.ledger.handledBy,
    reason: run.opts.ledger.reason,
  });
  await run.opts.producer.send({ topic, acks: -1, messages: [entry] });
  return true;
}

/**
 * Re-publishes the record to `original` with its key, bytes and headers minus the triage headers, plus
 * x-dlq-redrive-count; if that is too large, as its topic accepted it (without the count).
 * @returns false when it is too large even so (counted as tooLarge and logged); other send errors are thrown
 */
async function sendBack(
  run: RedriveRun,
  partition: number,
  message: KafkaMessage,
  original: string,
): Promise<boolean> {
  const h = message.headers ?? {};
  const kept: IHeaders = Object.fromEntries(Object.entries(h).filter(([k]) => !OURS.has(k)));
  kept[DLQ_HEADERS.redriveCount] = String(Number(header(h, DLQ_HEADERS.redriveCount) ?? 0) + 1);
  const back = { key: message.key, value: message.value, headers: kept };
  const { producer } = run.opts;
  try {
    await sendWithinLimit(producer, original, back).catch(async (e: unknown) => {
      if (!isTooLarge(e)) throw e;
      // The record as its topic accepted it, without the redrive count that made it too large.
      const { [DLQ_HEADERS.redriveCount]: _count, ...asAccepted } = kept;
      await sendWithinLimit(producer, original, { ...back, headers: asAccepted });
    });
    return true;
  } catch (e) {
    if (!isTooLarge(e)) throw e;
    run.report.tooLarge++;
    run.opts.logger.warn(
      { dlqTopic: run.opts.dlqTopic, partition, offset: message.offset, original, err: (e as Error).message },
      'DLQ record too large for its original topic, also compressed: left pending',
    );
    return false;
  }
}

function countMoved(
  run: RedriveRun,
  partition: number,
  message: KafkaMessage,
  original: string | undefined,
): void {
  const { report } = run;
  report.moved++;
  if (run.action === 'REDRIVEN' && report.redriven.length < REPORT_RECORDS_MAX)
    report.redriven.push({
      partition,
      offset: message.offset,
      key: message.key?.toString() ?? null,
      topic: original!,
    });
  const to = run.action === 'REDRIVEN' ? original! : '(discarded)';
  report.byTopic[to] = (report.byTopic[to] ?? 0) + 1;
}
