import { AssignerProtocol, type Admin, type Kafka, type KafkaMessage } from 'kafkajs';
import { undecodableBatchError } from './codecs';
import { DLQ_HEADERS, header } from './dlq';
import { handledCountIn, handledEntryOf, type HandledEntry } from './dlq-ledger';
import { undecodableBatchOf } from './undecodable';
import { isCatalogDlq } from './topics';

/** Offsets [from, to) of one partition of one topic to read; offsets are Kafka offsets as strings or bigints. */
export interface ScanRange {
  topic: string;
  partition: number;
  /** First offset to read (default: the partition's earliest). */
  from?: bigint;
  /** Read up to, not including, this offset: take it from {@link lastStableOffsets}. */
  to: bigint;
}

/**
 * The end of each partition of `topic` that a read_committed consumer can reach now: its last stable offset (LSO).
 * kafkajs's `admin.fetchTopicOffsets` sends ListOffsets v2+ with isolation_level READ_COMMITTED (kafkajs 2.2.4
 * requests/listOffsets default when the admin's cluster sets none), which the broker answers with the LSO, not the
 * high watermark (KIP-98). Also returns each partition's earliest offset (`low`). With `admin` (connected), asks
 * through it; otherwise connects an admin client of its own for the call.
 */
export async function lastStableOffsets(
  kafka: Kafka,
  topic: string,
  admin?: Admin,
): Promise<Array<{ partition: number; low: bigint; end: bigint }>> {
  const own = admin ? undefined : kafka.admin();
  await own?.connect();
  try {
    const offsets = await (admin ?? own!).fetchTopicOffsets(topic);
    return offsets.map((o) => ({ partition: o.partition, low: BigInt(o.low), end: BigInt(o.high) }));
  } finally {
    await own?.disconnect();
  }
}

/**
 * Where a group's consumer resumes in a partition: its committed offset (`-1`: none) clamped to the partition's
 * offsets, the earliest when it has none (the project's consumers start from the beginning).
 */
export function resumePosition(committed: string, partition: { low: bigint; end: bigint }): bigint {
  if (committed === '-1') return partition.low;
  const at = BigInt(committed);
  return at < partition.low ? partition.low : at > partition.end ? partition.end : at;
}

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

/**
 * Reads the given ranges with one read_committed consumer (a fresh consumer group that commits nothing) and calls
 * `each` for every record a read_committed consumer is given in them, in offset order per partition; resolves when
 * every range has been passed. Records a consumer is never given (commit/abort markers, records of aborted
 * transactions) count as passed: the consumer's END_BATCH_PROCESS event carries the batch's `lastOffset`, the last
 * offset of the raw fetched records including those (kafkajs consumer/batch.js `lastOffset()`; the runner emits the
 * event for a batch that held only such records too, consumer/runner.js `isEmptyDueToFiltering`). So a range that
 * ends on a marker is done when its marker is fetched, not waited on forever.
 * @throws UndecodableBatchError (code UNDECODABLE_BATCH) when a record batch in a range cannot be decompressed;
 *   whatever the consumer throws (kafkajs errors)
 */
export async function scanRanges(
  kafka: Kafka,
  ranges: ScanRange[],
  /** Called per record; returning false ends that range there. */
  each: (topic: string, partition: number, message: KafkaMessage) => void | boolean | Promise<void | boolean>,
  opts: { groupPrefix?: string } = {},
): Promise<void> {
  const id = (topic: string, partition: number) => `${topic}\u0000${partition}`;
  const remaining = new Map(
    ranges
      .filter((r) => r.to > (r.from ?? -1n) && r.to > 0n)
      .map((r) => [id(r.topic, r.partition), { ...r }]),
  );
  if (remaining.size === 0) return;
  const topics = [...new Set([...remaining.values()].map((r) => r.topic))];
  const groupId = `${opts.groupPrefix ?? 'keyflow-scan'}-${Date.now()}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  /** Per range, the next offset to give `each`: a record below it (fetched again after a rejoin) is skipped. */
  const next = new Map<string, bigint>();
  const consumer = kafka.consumer({
    groupId,
    readUncommitted: false,
    maxWaitTimeInMs: 100,
    // A failure is the caller's to see (rejected below), not a restart that would read the ranges again.
    retry: { retries: 2, restartOnFailure: async () => false },
  });
  try {
    // Where the fresh group starts: where the ranges start (their partitions) or at the end (the topics' other
    // partitions). Seeks given right after run() is called, before its first fetch: kafkajs creates the consumer
    // group synchronously in run() and applies pending seeks at the start of every fetch, leaving out any response
    // for a partition with a seek still pending (consumer/consumerGroup.js fetch, seekOffsets), so the first fetch
    // reads from there. After a rejoin the seeks are given again (below); records before a range's next offset are
    // skipped in any case. (admin.setOffsets would run a consumer of its own per topic, waiting out a fetch each.)
    const starts: Array<{ topic: string; partition: number; offset: string }> = [];
    const admin = kafka.admin();
    await admin.connect();
    try {
      for (const topic of topics)
        for (const o of await admin.fetchTopicOffsets(topic)) {
          const key = id(topic, o.partition);
          const r = remaining.get(key);
          let from = r ? (r.from ?? BigInt(o.low)) : BigInt(o.high);
          if (from < BigInt(o.low)) from = BigInt(o.low); // deleted by retention meanwhile
          if (r && r.to > BigInt(o.high)) r.to = BigInt(o.high); // the topic was recreated: never reachable
          if (r && from >= r.to)
            remaining.delete(key); // nothing left of the range: no batch would come
          else if (r) next.set(key, from);
          starts.push({ topic, partition: o.partition, offset: String(from) });
        }
      // A range on a partition the topic does not have (any more) has nothing to read.
      const listed = new Set(starts.map((st) => id(st.topic, st.partition)));
      for (const key of [...remaining.keys()]) if (!listed.has(key)) remaining.delete(key);
    } finally {
      await admin.disconnect();
    }
    if (remaining.size === 0) return;
    await consumer.connect();
    for (const topic of topics) await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      /** Everything below `upTo` in the partition was fetched (delivered, aborted or a marker). */
      const reached = (topic: string, partition: number, upTo: bigint) => {
        const r = remaining.get(id(topic, partition));
        if (r && upTo >= r.to) remaining.delete(id(topic, partition));
        if (remaining.size === 0) resolve();
      };
      consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) =>
        reached(payload.topic, payload.partition, BigInt(payload.lastOffset) + 1n),
      );
      consumer.on(consumer.events.CRASH, ({ payload }) => reject(payload.error));
      // A rejoin (a leader change, a lost membership) builds a new offset manager that forgets the seeks, and the
      // group has committed nothing: seek again, each range to where it got to, the other partitions to their end.
      let joined = 0;
      consumer.on(consumer.events.GROUP_JOIN, () => {
        if (joined++ === 0) return; // the first join: the seeks given after run() are still pending
        for (const st of starts) {
          const key = id(st.topic, st.partition);
          const at = remaining.has(key) ? next.get(key) : undefined;
          consumer.seek({ ...st, offset: at !== undefined ? String(at) : st.offset });
        }
      });
      consumer
        .run({
          autoCommit: false,
          eachMessage: async ({ topic, partition, message }) => {
            const key = id(topic, partition);
            const r = remaining.get(key);
            const offset = BigInt(message.offset);
            if (!r || offset >= r.to || offset < (next.get(key) ?? 0n)) return;
            next.set(key, offset + 1n);
            const undecodable = undecodableBatchOf(message);
            if (undecodable) return reject(undecodableBatchError(topic, partition, undecodable));
            let more: void | boolean;
            try {
              more = await each(topic, partition, message);
            } catch (err) {
              return reject(err); // the caller's failure ends the scan (kafkajs would retry the batch)
            }
            if (more === false) {
              remaining.delete(key); // the caller has what it needs from this range
              if (remaining.size === 0) resolve();
              return;
            }
            reached(topic, partition, offset + 1n);
          },
        })
        .catch(reject);
      for (const start of starts) consumer.seek(start);
    });
  } finally {
    await consumer.disconnect().catch(() => undefined);
    // The scan's group committed nothing: it is deleted so it does not linger in group lists.
    const cleanup = kafka.admin();
    await cleanup
      .connect()
      .then(() => cleanup.deleteGroups([groupId]))
      .catch(() => undefined)
      .finally(() => cleanup.disconnect());
  }
}

/** The lag of a consumer group on one partition. Offsets are Kafka offsets; times are ms since epoch. */
export interface PartitionLag {
  topic: string;
  partition: number;
  /** The group's committed offset, or null when it has none (its consumers would start at the earliest). */
  committed: string | null;
  /** The partition's last stable offset: what a read_committed consumer can reach now. */
  end: string;
  /**
   * Records a read_committed consumer would still be given before it reaches `end`: transaction markers and
   * records of aborted transactions are not counted (Kafka's own tools count them, so a transactional topic shows a
   * lag of 1 where nothing is left to read). Exact when `exact`; otherwise `end - position`, an upper bound.
   */
  lag: number;
  exact: boolean;
  /** Age (ms, against `now`) of the oldest record the group has not consumed, by its timestamp; null when none. */
  oldestAgeMs: number | null;
}

/** Name prefixes of the short-lived consumer groups the scans of this module use (hidden from group lists). */
export const SCAN_GROUP_PREFIXES = ['keyflow-scan', 'keyflow-redrive', 'keyflow-lag'] as const;

/**
 * The lag of consumer group `groupId` on every partition of the topics it has committed offsets on or its live
 * members subscribe to (or of `topics`); a partition without a committed offset counts from its earliest record.
 * Partitions whose offset difference to the LSO is at most `exactUpTo` (default 10,000) are read (one read_committed
 * scan for all of them) and their records counted; larger ones report the difference as an upper bound. Every partition with something left is read far enough to find the oldest record's timestamp.
 */
export async function groupLag(
  kafka: Kafka,
  groupId: string,
  opts: { topics?: string[]; exactUpTo?: number; now?: number } = {},
): Promise<PartitionLag[]> {
  const exactUpTo = BigInt(opts.exactUpTo ?? 10_000);
  const admin = kafka.admin();
  await admin.connect();
  const out: PartitionLag[] = [];
  const ranges: ScanRange[] = [];
  const byRange = new Map<string, PartitionLag>();
  try {
    let topics = opts.topics;
    if (!topics) {
      // The topics the group has committed on, and those its live members subscribe to (a topic a consumer has not
      // committed on yet is lag too); asked for by name, every partition is listed (offset -1: none committed).
      const withOffsets = (await admin.fetchOffsets({ groupId })).map((t) => t.topic);
      const [group] = (await admin.describeGroups([groupId])).groups;
      const subscribed = group.members.flatMap((m) => {
        try {
          return AssignerProtocol.MemberMetadata.decode(m.memberMetadata)?.topics ?? [];
        } catch {
          return []; // not a consumer protocol member
        }
      });
      topics = [...new Set([...withOffsets, ...subscribed])];
      if (!topics.length) return [];
    }
    for (const { topic, partitions } of await admin.fetchOffsets({ groupId, topics })) {
      const ends = new Map((await lastStableOffsets(kafka, topic, admin)).map((e) => [e.partition, e]));
      for (const { partition, offset } of partitions) {
        const e = ends.get(partition);
        if (!e) continue;
        const position = resumePosition(offset, e);
        const diff = e.end - position;
        const lag: PartitionLag = {
          topic,
          partition,
          committed: offset === '-1' ? null : offset,
          end: String(e.end),
          lag: diff <= exactUpTo ? 0 : Number(diff),
          exact: diff <= exactUpTo,
          oldestAgeMs: null,
        };
        out.push(lag);
        if (diff === 0n) continue;
        // Small ranges are read whole (and counted); a large one only up to its oldest record.
        ranges.push({ topic, partition, from: position, to: e.end });
        byRange.set(`${topic}\u0000${partition}`, lag);
      }
    }
  } finally {
    await admin.disconnect();
  }
  const now = opts.now ?? Date.now();
  await scanRanges(
    kafka,
    ranges,
    (topic, partition, m) => {
      const lag = byRange.get(`${topic}\u0000${partition}`)!;
      if (lag.oldestAgeMs === null) lag.oldestAgeMs = Math.max(0, now - Number(m.timestamp));
      if (!lag.exact) return false; // a large range: only its oldest record was wanted
      lag.lag++;
    },
    { groupPrefix: 'keyflow-lag' },
  );
  return out.sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition));
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
 * oldest and newest failure, top error classes (from the x-dlq-* triage headers, libs/kafka dlq.ts).
 */
export async function summarizeDlqs(
  kafka: Kafka,
  topics: string[],
  opts: {
    /** Partitions with more offsets than this are not read: their offset span counts as records (an upper bound). */
    exactUpTo?: number;
    /** The DLQ ledger (readDlqLedger): the records it names do not count as pending. */
    handled?: ReadonlyMap<string, HandledEntry>;
  } = {},
): Promise<DlqSummary[]> {
  const byTopic = new Map<string, DlqSummary & { errors: Map<string, number> }>();
  const ranges: ScanRange[] = [];
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
          summary.pending += Math.max(
            0,
            Number(e.end - e.low) - handledCountIn(opts.handled, topic, e.partition, e.low, e.end),
          );
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
