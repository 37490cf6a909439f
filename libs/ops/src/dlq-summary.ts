import type { Kafka } from '@keyflow/kafka';
import { isCatalogDlq } from './catalog';
import { DLQ_HEADERS, header } from './dlq-headers';
import { HandledOffsets, handledEntryOf, type HandledEntry } from './dlq-ledger';
import { lastStableOffsets, scanRanges, type ScanRange } from './scan';

/**
 * The deployment's DLQ topics (physical names, sorted): those under `prefix` (KEYFLOW_TOPIC_PREFIX) whose logical name
 * is a DLQ keyflow declares ({@link isCatalogDlq}; with `declared`, only those logical names). Every other `*.dlq`
 * topic of the cluster (another deployment's, another application's) is left out, an empty prefix included.
 */
export async function listDlqTopics(
  kafka: Kafka,
  prefix: string,
  declared?: ReadonlySet<string>,
): Promise<string[]> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    return (await admin.listTopics())
      .filter((t) => t.startsWith(prefix) && isCatalogDlq(t.slice(prefix.length), declared))
      .sort();
  } finally {
    await admin.disconnect();
  }
}

/** One DLQ topic's summary. Times are ms since epoch (the last failure's header, else the record's timestamp). */
export interface DlqSummary {
  topic: string;
  /** Records a read_committed consumer is given (markers and aborted records not counted), if `exact`. */
  records: number;
  /**
   * Records still waiting for an operator: `records` minus those the DLQ ledger (`handled`) says were redriven or
   * discarded. Equal to `records` when no ledger was given.
   */
  pending: number;
  /** False when a partition was too large to read (see summarizeDlqs): `records` is then an upper bound. */
  exact: boolean;
  /** Oldest and newest failure among the pending records. */
  oldest: number | null;
  newest: number | null;
  /** Error classes of the pending records by count, most frequent first (at most 5). */
  topErrors: Array<{ errorClass: string; count: number }>;
}

/**
 * Reads each DLQ topic (physical names) up to its last stable offset, in one scan, and sums it up: record count,
 * oldest and newest failure, top error classes (from the x-dlq-* triage headers, ./dlq-headers).
 */
export async function summarizeDlqs(
  kafka: Kafka,
  topics: string[],
  opts: {
    /** Partitions with more offsets than this are not read: their offset span counts as records (an upper bound). */
    exactUpTo?: number;
    /** The DLQ ledger (readDlqLedger): the records it names do not count as pending. */
    handled?: ReadonlyMap<string, HandledEntry>;
    /**
     * The offsets of `handled` per DLQ partition (a DlqLedgerView's `offsets`), for the partitions too large to read;
     * without it they are indexed from `handled` once per call.
     */
    handledOffsets?: HandledOffsets;
  } = {},
): Promise<DlqSummary[]> {
  const byTopic = new Map<string, DlqSummary & { errors: Map<string, number> }>();
  const ranges: ScanRange[] = [];
  let offsets = opts.handledOffsets;
  const handledIn = (topic: string, partition: number, low: bigint, end: bigint) =>
    opts.handled ? (offsets ??= HandledOffsets.of(opts.handled)).countIn(topic, partition, low, end) : 0;
  const admin = kafka.admin();
  await admin.connect();
  try {
    for (const topic of topics) {
      const summary = {
        topic,
        records: 0,
        pending: 0,
        exact: true,
        oldest: null,
        newest: null,
        topErrors: [],
        errors: new Map(),
      };
      byTopic.set(topic, summary);
      for (const e of await lastStableOffsets(kafka, topic, admin)) {
        if (opts.exactUpTo !== undefined && e.end - e.low > BigInt(opts.exactUpTo)) {
          summary.records += Number(e.end - e.low);
          summary.pending += Math.max(0, Number(e.end - e.low) - handledIn(topic, e.partition, e.low, e.end));
          summary.exact = false;
        } else ranges.push({ topic, partition: e.partition, from: e.low, to: e.end });
      }
    }
  } finally {
    await admin.disconnect();
  }
  await scanRanges(kafka, ranges, (topic, partition, m) => {
    const s = byTopic.get(topic)!;
    const at = Number(header(m.headers, DLQ_HEADERS.lastFailureAt) ?? m.timestamp);
    s.records++;
    if (handledEntryOf(opts.handled, topic, partition, m)) return;
    s.pending++;
    s.oldest = s.oldest === null ? at : Math.min(s.oldest, at);
    s.newest = s.newest === null ? at : Math.max(s.newest, at);
    const cls = header(m.headers, DLQ_HEADERS.errorClass) ?? '(none)';
    s.errors.set(cls, (s.errors.get(cls) ?? 0) + 1);
  });
  return [...byTopic.values()].map(({ errors, ...s }) => ({
    ...s,
    topErrors: [...errors]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 5)
      .map(([errorClass, count]) => ({ errorClass, count })),
  }));
}
