import type { Admin, ITopicConfig } from 'kafkajs';
import { KeyflowError, retryableOf } from '@keyflow/errors';
import { isTopicSettling } from '../kafka-errors';
import {
  DEFAULT_GROUP_IDS,
  defaultGroupId,
  TOPICS_SETTLE_TIMEOUT_MS,
  type GroupIdMigrationOptions,
} from './options';
import type { EffectiveReplication, TopicSpec } from './types';

/**
 * The replication a topic gets on `liveBrokers` brokers: the wanted replication factor capped by the broker count
 * (a create with more replicas than brokers fails with INVALID_REPLICATION_FACTOR), and min ISR lowered with it so
 * the topic still tolerates as many lost replicas as the wanted pair does (RF 3 / min ISR 2 tolerates one: on two
 * brokers it becomes RF 2 / min ISR 1, on one broker RF 1 / min ISR 1), never below 1 and never above the factor.
 * With acks=all a write needs `min.insync.replicas` in-sync replicas (Kafka docs, "min.insync.replicas"), so a min
 * ISR equal to RF would stop writes at the first broker loss.
 * @throws RangeError when `liveBrokers` is below 1 or a wanted value is not a positive integer.
 */
export function effectiveReplication(
  wanted: EffectiveReplication,
  liveBrokers: number,
): EffectiveReplication {
  for (const [name, v] of Object.entries({ liveBrokers, ...wanted }))
    if (!Number.isInteger(v) || v < 1) throw new RangeError(`${name} must be a positive integer, got ${v}`);
  const rf = Math.min(wanted.replicationFactor, liveBrokers);
  const tolerated = Math.max(0, wanted.replicationFactor - wanted.minInsyncReplicas);
  const minIsr = Math.max(1, Math.min(wanted.minInsyncReplicas, rf - tolerated, rf));
  return { replicationFactor: rf, minInsyncReplicas: minIsr };
}

/**
 * The `createTopics` entry of a spec on `liveBrokers` brokers: partitions, configs, and the replication factor and
 * `min.insync.replicas` of {@link effectiveReplication} when the spec names them (a `min.insync.replicas` in
 * `configs` wins over `minInsyncReplicas`).
 */
export function topicCreation(spec: TopicSpec, liveBrokers: number): ITopicConfig {
  const configs = { ...(spec.configs ?? {}) };
  let replicationFactor: number | undefined;
  if (spec.replicationFactor !== undefined) {
    const eff = effectiveReplication(
      {
        replicationFactor: spec.replicationFactor,
        minInsyncReplicas: Math.min(spec.minInsyncReplicas ?? 1, spec.replicationFactor),
      },
      liveBrokers,
    );
    replicationFactor = eff.replicationFactor;
    if (spec.minInsyncReplicas !== undefined && configs['min.insync.replicas'] === undefined)
      configs['min.insync.replicas'] = String(eff.minInsyncReplicas);
  }
  return {
    topic: spec.topic,
    numPartitions: spec.partitions,
    ...(replicationFactor !== undefined ? { replicationFactor } : {}),
    configEntries: Object.entries(configs).map(([name, value]) => ({ name, value })),
  };
}

/**
 * Topics that must be co-partitioned have different partition counts (at startup, or in the group leader's
 * co-partitioned assignment). Not retryable: fix the topics.
 */
export class PartitionCountMismatchError extends KeyflowError {
  readonly code = 'PARTITION_COUNT_MISMATCH' as const;
  readonly retryable = retryableOf('PARTITION_COUNT_MISMATCH');
  constructor(readonly counts: Record<string, number>) {
    super(
      `topics must have the same partition count (co-partitioned by key) but have ${Object.entries(counts)
        .map(([t, n]) => `${t}=${n}`)
        .join(', ')}`,
    );
  }
}

/** Topics that a create left missing: their metadata lags the creation (retried by {@link retryWhileTopicsSettle}). */
export class TopicsStillMissingError extends KeyflowError {
  readonly code = 'TOPICS_STILL_MISSING';
  readonly retryable = retryableOf('TOPICS_STILL_MISSING');
  constructor(readonly topics: string[]) {
    super(`UNKNOWN_TOPIC: still missing after create: ${topics.join(', ')}`);
  }
}

/**
 * Runs `f` again while the broker's metadata lags a topic creation (by this or another service starting at the same
 * time: UNKNOWN_TOPIC_OR_PARTITION, TOPIC_ALREADY_EXISTS, no leader yet), for up to `timeoutMs` (default 30 000).
 * @throws the last error when it persists, or at once when it is of another kind.
 */
export async function retryWhileTopicsSettle<T>(
  f: () => Promise<T>,
  timeoutMs = TOPICS_SETTLE_TIMEOUT_MS,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let n = 1; ; n++) {
    try {
      return await f();
    } catch (e) {
      const settling = e instanceof TopicsStillMissingError || isTopicSettling(e);
      if (!settling || Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, Math.min(1_000, 100 * n)));
    }
  }
}

/**
 * Creates the topics that do not exist yet and waits until all exist. Replication: each spec's
 * `replicationFactor` / `minInsyncReplicas` capped by the live broker count (DescribeCluster; see
 * {@link effectiveReplication}), or the broker defaults when the spec names none. Existing topics are left as they
 * are. Several services may create the same topics at startup: a create that loses the race, or metadata that lags a
 * creation, is retried (see {@link retryWhileTopicsSettle}).
 */
export async function ensureTopics(admin: Admin, specs: TopicSpec[]): Promise<void> {
  await retryWhileTopicsSettle(async () => {
    const existing = new Set(await admin.listTopics());
    const todo = specs.filter((s) => !existing.has(s.topic));
    if (todo.length === 0) return;
    const liveBrokers = todo.some((s) => s.replicationFactor !== undefined)
      ? (await admin.describeCluster()).brokers.length
      : 1;
    const missing: ITopicConfig[] = todo.map((s) => topicCreation(s, liveBrokers));
    await admin.createTopics({ topics: missing, waitForLeaders: true });
    const now = new Set(await admin.listTopics());
    const still = specs.filter((s) => !now.has(s.topic)).map((s) => s.topic);
    if (still.length) throw new TopicsStillMissingError(still);
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
  timeoutMs = TOPICS_SETTLE_TIMEOUT_MS,
): Promise<void> {
  await retryWhileTopicsSettle(() => consumer.subscribe({ topic, fromBeginning }), timeoutMs);
}

/**
 * A prefixed deployment's service would start a new consumer group while the group versions before
 * {@link defaultGroupId} used still holds its committed offsets: the new group would read every retained record again
 * (the services subscribe from the beginning). Not retryable: the message names the settings that resolve it.
 */
export class GroupIdMigrationError extends KeyflowError {
  readonly code = 'GROUP_ID_MIGRATION' as const;
  readonly retryable = retryableOf('GROUP_ID_MIGRATION');
  constructor(
    readonly groupId: string,
    readonly legacyGroupId: string,
    readonly setting: string,
    topics: string[],
  ) {
    super(
      `consumer group ${groupId} (the default for KEYFLOW_TOPIC_PREFIX) has no committed offsets on ${topics.join(', ')}, ` +
        `but ${legacyGroupId} (the default before the prefix applied to group ids) has: starting would read every ` +
        `retained record again. Set ${setting}=${legacyGroupId} to go on with the old group (one deployment per ` +
        `cluster), or copy its committed offsets of these topics to ${groupId} (kafka-consumer-groups --reset-offsets ` +
        `--from-file) and start again, or delete them from ${legacyGroupId} (kafka-consumer-groups --delete-offsets) ` +
        `to start ${groupId} from the beginning on purpose`,
    );
  }
}

/**
 * Refuses to start a service of a prefixed deployment on its default group id (`<prefix>keyflow.<service>`) while
 * that group has no committed offset on `topics` (physical names) and the unprefixed default of earlier versions
 * (`keyflow.<service>`) has one: the upgrade of a deployment that relied on the old default. Does nothing for an
 * unprefixed deployment or a group id other than the default.
 * @throws GroupIdMigrationError in that case; kafkajs errors when the offsets cannot be read.
 */
export async function assertGroupIdMigrated(admin: Admin, opts: GroupIdMigrationOptions): Promise<void> {
  const legacy = DEFAULT_GROUP_IDS[opts.service];
  if (opts.topicPrefix === '' || opts.groupId !== defaultGroupId(opts.service, opts.topicPrefix)) return;
  const committed = async (groupId: string) =>
    (await admin.fetchOffsets({ groupId, topics: opts.topics })).some((t) =>
      t.partitions.some((p) => Number(p.offset) >= 0),
    );
  if (!(await committed(opts.groupId)) && (await committed(legacy)))
    throw new GroupIdMigrationError(opts.groupId, legacy, opts.setting, opts.topics);
}
