import {
  undecodableBatchError,
  undecodableBatchOf,
  type Admin,
  type Consumer,
  type Kafka,
  type KafkaMessage,
} from '@keyflow/kafka';

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
  each: ScanEach,
  opts: { groupPrefix?: string } = {},
): Promise<void> {
  const remaining = new Map(
    ranges
      .filter((r) => r.to > (r.from ?? -1n) && r.to > 0n)
      .map((r) => [rangeId(r.topic, r.partition), { ...r }]),
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
    const starts = await startPositions(kafka, topics, remaining, next);
    if (remaining.size === 0) return;
    await consumer.connect();
    for (const topic of topics) await consumer.subscribe({ topic, fromBeginning: true });
    await readRanges(consumer, { remaining, next, starts, each });
  } finally {
    await consumer.disconnect().catch(() => undefined);
    await deleteScanGroup(kafka, groupId);
  }
}

/** What {@link scanRanges} calls per record; returning false ends that range there. */
type ScanEach = (
  topic: string,
  partition: number,
  message: KafkaMessage,
) => void | boolean | Promise<void | boolean>;

/** Where a partition's reading starts (offset a decimal string). */
type Start = { topic: string; partition: number; offset: string };

const rangeId = (topic: string, partition: number) => `${topic}\u0000${partition}`;

/**
 * Where the fresh group starts: where the ranges start (their partitions) or at the end (the topics' other
 * partitions). Seeks are given right after run() is called, before its first fetch: kafkajs creates the consumer
 * group synchronously in run() and applies pending seeks at the start of every fetch, leaving out any response for a
 * partition with a seek still pending (consumer/consumerGroup.js fetch, seekOffsets), so the first fetch reads from
 * there. After a rejoin the seeks are given again (see readRanges); records before a range's next offset are
 * skipped in any case. (admin.setOffsets would run a consumer of its own per topic, waiting out a fetch each.)
 * Drops from `remaining` the ranges with nothing left (deleted by retention, a recreated topic, a partition the
 * topic does not have) and sets `next` of the others.
 */
async function startPositions(
  kafka: Kafka,
  topics: string[],
  remaining: Map<string, ScanRange>,
  next: Map<string, bigint>,
): Promise<Start[]> {
  const starts: Start[] = [];
  const admin = kafka.admin();
  await admin.connect();
  try {
    for (const topic of topics)
      for (const o of await admin.fetchTopicOffsets(topic)) {
        const key = rangeId(topic, o.partition);
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
    const listed = new Set(starts.map((st) => rangeId(st.topic, st.partition)));
    for (const key of [...remaining.keys()]) if (!listed.has(key)) remaining.delete(key);
  } finally {
    await admin.disconnect();
  }
  return starts;
}

/**
 * Runs the (connected, subscribed) consumer from `starts` until every range in `remaining` has been passed.
 * @throws UndecodableBatchError, the caller's `each` errors, the consumer's crash
 */
function readRanges(
  consumer: Consumer,
  scan: { remaining: Map<string, ScanRange>; next: Map<string, bigint>; starts: Start[]; each: ScanEach },
): Promise<void> {
  const { remaining, next, starts, each } = scan;
  return new Promise<void>((resolve, reject) => {
    /** Everything below `upTo` in the partition was fetched (delivered, aborted or a marker). */
    const reached = (topic: string, partition: number, upTo: bigint) => {
      const r = remaining.get(rangeId(topic, partition));
      if (r && upTo >= r.to) remaining.delete(rangeId(topic, partition));
      if (remaining.size === 0) resolve();
    };
    consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) =>
      reached(payload.topic, payload.partition, BigInt(payload.lastOffset) + 1n),
    );
    consumer.on(consumer.events.CRASH, ({ payload }) => reject(payload.error));
    seekAgainOnRejoin(consumer, remaining, next, starts);
    consumer
      .run({
        autoCommit: false,
        eachMessage: async ({ topic, partition, message }) => {
          const key = rangeId(topic, partition);
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
}

/**
 * A rejoin (a leader change, a lost membership) builds a new offset manager that forgets the seeks, and the group
 * has committed nothing: seek again, each range to where it got to, the other partitions to their end. The first
 * join is left alone: the seeks given after run() are still pending then.
 */
function seekAgainOnRejoin(
  consumer: Consumer,
  remaining: Map<string, ScanRange>,
  next: Map<string, bigint>,
  starts: Start[],
): void {
  let joined = 0;
  consumer.on(consumer.events.GROUP_JOIN, () => {
    if (joined++ === 0) return;
    for (const st of starts) {
      const key = rangeId(st.topic, st.partition);
      const at = remaining.has(key) ? next.get(key) : undefined;
      consumer.seek({ ...st, offset: at !== undefined ? String(at) : st.offset });
    }
  });
}

/** The scan's group committed nothing: it is deleted so it does not linger in group lists. Never throws. */
async function deleteScanGroup(kafka: Kafka, groupId: string): Promise<void> {
  const cleanup = kafka.admin();
  await cleanup
    .connect()
    .then(() => cleanup.deleteGroups([groupId]))
    .catch(() => undefined)
    .finally(() => cleanup.disconnect());
}
