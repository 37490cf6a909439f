import type { Admin, ITopicConfig } from 'kafkajs';

export interface TopicSpec {
  topic: string;
  partitions: number;
  /** Topic configs, e.g. `{ 'cleanup.policy': 'compact' }`, `{ 'retention.ms': '604800000' }`. */
  configs?: Record<string, string>;
}

/** Topics that must be co-partitioned have different partition counts. Not retryable: fix the topics. */
export class PartitionCountMismatchError extends Error {
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

/**
 * Creates the topics that do not exist yet (replication factor from the broker default) and waits until all exist.
 * Several services may create the same topics at startup: a create that loses the race (TOPIC_ALREADY_EXISTS for
 * some topics, while the others of the request are created) is followed by another look, up to 5 rounds.
 * @throws the broker's error when topics are still missing after that.
 */
export async function ensureTopics(admin: Admin, specs: TopicSpec[]): Promise<void> {
  let lastError: unknown;
  for (let round = 1; round <= 5; round++) {
    const existing = new Set(await admin.listTopics());
    const missing: ITopicConfig[] = specs
      .filter((s) => !existing.has(s.topic))
      .map((s) => ({
        topic: s.topic,
        numPartitions: s.partitions,
        configEntries: Object.entries(s.configs ?? {}).map(([name, value]) => ({ name, value })),
      }));
    if (missing.length === 0) return;
    try {
      await admin.createTopics({ topics: missing, waitForLeaders: true });
    } catch (e) {
      lastError = e; // typically TOPIC_ALREADY_EXISTS from a concurrent creator: look again
      await new Promise((r) => setTimeout(r, 200 * round));
    }
  }
  const existing = new Set(await admin.listTopics());
  const still = specs.filter((s) => !existing.has(s.topic)).map((s) => s.topic);
  if (still.length) throw lastError ?? new Error(`topics still missing: ${still.join(', ')}`);
}

/** Partition count of each topic. */
export async function partitionCounts(admin: Admin, topics: string[]): Promise<Record<string, number>> {
  const md = await admin.fetchTopicMetadata({ topics });
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
  const deadline = Date.now() + timeoutMs;
  for (let n = 1; ; n++) {
    try {
      await consumer.subscribe({ topic, fromBeginning });
      return;
    } catch (e) {
      const unknown = /does not host this topic-partition|UNKNOWN_TOPIC|not found/i.test(
        String((e as Error)?.message),
      );
      if (!unknown || Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, Math.min(1_000, 100 * n)));
    }
  }
}
