import type { Admin, ITopicConfig } from 'kafkajs';

export interface TopicSpec {
  topic: string;
  partitions: number;
  /** Topic configs, e.g. `{ 'cleanup.policy': 'compact' }`, `{ 'retention.ms': '604800000' }`. */
  configs?: Record<string, string>;
}

/**
 * Topics that must be co-partitioned have different partition counts (at startup, or in the group leader's
 * co-partitioned assignment). Not retryable: fix the topics.
 */
export class PartitionCountMismatchError extends Error {
  readonly code = 'PARTITION_COUNT_MISMATCH' as const;
  readonly retryable = false;
  constructor(readonly counts: Record<string, number>) {
    super(
      `topics must have the same partition count (co-partitioned by key) but have ${Object.entries(counts)
        .map(([t, n]) => `${t}=${n}`)
        .join(', ')}`,
    );
    this.name = 'PartitionCountMismatchError';
  }
}

const TRANSIENT_METADATA =
  /does not host this topic-partition|UNKNOWN_TOPIC|already exists|Topic creation errors|LEADER_NOT_AVAILABLE|There is no leader/i;

/**
 * Runs `f` again while the broker's metadata lags a topic creation (by this or another service starting at the same
 * time: UNKNOWN_TOPIC_OR_PARTITION, TOPIC_ALREADY_EXISTS, no leader yet), for up to `timeoutMs` (default 30 000).
 * @throws the last error when it persists, or at once when it is of another kind.
 */
export async function retryWhileTopicsSettle<T>(f: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let n = 1; ; n++) {
    try {
      return await f();
    } catch (e) {
      if (!TRANSIENT_METADATA.test(String((e as Error)?.message)) || Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, Math.min(1_000, 100 * n)));
    }
  }
}

/**
 * Creates the topics that do not exist yet (replication factor from the broker default) and waits until all exist.
 * Several services may create the same topics at startup: a create that loses the race, or metadata that lags a
 * creation, is retried (see {@link retryWhileTopicsSettle}).
 */
export async function ensureTopics(admin: Admin, specs: TopicSpec[]): Promise<void> {
  await retryWhileTopicsSettle(async () => {
    const existing = new Set(await admin.listTopics());
    const missing: ITopicConfig[] = specs
      .filter((s) => !existing.has(s.topic))
      .map((s) => ({
        topic: s.topic,
        numPartitions: s.partitions,
        configEntries: Object.entries(s.configs ?? {}).map(([name, value]) => ({ name, value })),
      }));
    if (missing.length === 0) return;
    await admin.createTopics({ topics: missing, waitForLeaders: true });
    const now = new Set(await admin.listTopics());
    const still = specs.filter((s) => !now.has(s.topic)).map((s) => s.topic);
    if (still.length) throw new Error(`UNKNOWN_TOPIC: still missing after create: ${still.join(', ')}`);
  });
}

/** Partition count of each topic. */
export async function partitionCounts(admin: Admin, topics: string[]): Promise<Record<string, number>> {
  const md = await retryWhileTopicsSettle(() => admin.fetchTopicMetadata({ topics }));
  return Object.fromEntries(md.topics.map((t) => [t.name, t.partitions.length]));
}

/** @throws PartitionCountMismatchError when the topics' partition counts differ. */
export async function assertCoPartitioned(admin: Admin, topics: string[]): Promise<number> {
  const counts = await partitionCounts(admin, topics);
  const distinct = new Set(Object.values(counts));
  if (distinct.size !== 1) throw new PartitionCountMismatchError(counts);
  return [...distinct][0];
}

/**
 * Subscribes, retrying while the broker does not know the topic yet (a topic created a moment ago by this or another
 * service: metadata may lag its creation). Gives up after `timeoutMs` (default 30 000) with the broker's error.
 */
export async function subscribeWhenReady(
  consumer: { subscribe(s: { topic: string; fromBeginning: boolean }): Promise<void> },
  topic: string,
  fromBeginning: boolean,
  timeoutMs = 30_000,
): Promise<void> {
  await retryWhileTopicsSettle(() => consumer.subscribe({ topic, fromBeginning }), timeoutMs);
}
