import type { Kafka } from 'kafkajs';
import type { ComponentHealth, Logger, Registry } from '@keyflow/observability';
import type { MessageHandler } from './types';
import { UNDECODABLE_RETRY_MS } from './undecodable';

/**
 * The backoff of a handler's infrastructure retries (full jitter, capped exponential growth). A
 * `@keyflow/workflow` RetryPolicy has this shape, so the caller may pass one; `maxAttempts` and
 * `nonRetryableErrors` are accepted and not read: these retries are unbounded.
 */
export interface BackoffPolicy {
  /** Cap of the first delay, ms (>= 0). */
  readonly initialDelayMs: number;
  /** Largest cap, ms (>= initialDelayMs). */
  readonly maxDelayMs: number;
  /** Growth of the cap per failure (>= 1). */
  readonly multiplier: number;
  readonly maxAttempts?: number;
  readonly nonRetryableErrors?: readonly string[];
}

/** The backoff when none is given: 200 ms doubling up to 5 s. */
export const DEFAULT_INFRA_BACKOFF: BackoffPolicy = Object.freeze({
  initialDelayMs: 200,
  maxDelayMs: 5_000,
  multiplier: 2,
});

/**
 * Delay in ms before the retry after failure number `failures` (1-based): uniform in [0, cap] with
 * cap = floor(min(maxDelayMs, initialDelayMs * multiplier^(failures-1))).
 */
export function backoffDelayMs(
  policy: BackoffPolicy,
  failures: number,
  random: () => number = Math.random,
): number {
  const cap = Math.floor(
    Math.min(
      policy.maxDelayMs,
      policy.initialDelayMs * Math.pow(policy.multiplier, Math.max(0, failures - 1)),
    ),
  );
  return Math.floor(random() * (cap + 1));
}

export interface OrderedConsumerOptions {
  kafka: Kafka;
  /** Consumer group id, used on the broker exactly as given. */
  groupId: string;
  topics: string[];
  handle: MessageHandler;
  logger: Logger;
  /** A new group starts from the earliest offset (default true): a new consumer reads full history, on purpose. */
  fromBeginning?: boolean;
  /** Messages dispatched and not completed, per partition (default 32). */
  maxInFlightPerPartition?: number;
  /** Messages dispatched and not completed, per process (default 128). */
  maxInFlight?: number;
  /** Partitions whose batches run at once (kafkajs partitionsConsumedConcurrently, default 4). */
  partitionsConsumedConcurrently?: number;
  /** Group session timeout in ms (default 30 000). Long handlers are covered by heartbeats, not by raising it. */
  sessionTimeoutMs?: number;
  /** Heartbeat period in ms while a batch runs (default 3 000; must be well under the session timeout). */
  heartbeatIntervalMs?: number;
  /** Rebalance timeout in ms: how long a rebalance waits for this member's batches (default 60 000). */
  rebalanceTimeoutMs?: number;
  /**
   * At most one OffsetCommit per partition this often, in ms (default 1 000): the completed prefix is committed while
   * a batch runs and when it ends, and the asks within the interval go out as one commit of the highest. What was
   * completed and not yet committed when the partition moves is redelivered (the idempotency layer absorbs it).
   */
  commitIntervalMs?: number;
  /** Backoff for handler rejections (infrastructure failures); attempts are unbounded, delays are not. */
  infraRetry?: BackoffPolicy;
  /** Largest fetch per partition in bytes (default 1 MiB): bounds memory with a large backlog. */
  maxBytesPerPartition?: number;
  /**
   * Longest a fetch waits at the broker while one of the consumer's partitions is paused for its next batch, in ms
   * (default 100). That partition is left out of the fetch in flight, so this bounds how long its records wait once
   * it resumes; lower costs more fetch requests while partitions are busy. Otherwise idleFetchMaxWaitMs applies.
   */
  fetchMaxWaitMs?: number;
  /**
   * Longest a fetch waits at the broker while no partition of this consumer is paused for its next batch (one held
   * by the quarantine does not count), in ms (default 500; fetchMaxWaitMs when that is higher): a fetch is answered
   * as soon as a record arrives, so this only spaces an idle consumer's requests (at fetchMaxWaitMs, an idle worker
   * made 100 fetch requests a second to each broker leading one of its partitions). kafkajs asks it before each
   * fetch through keyflow's patch ("wait chosen per fetch").
   */
  idleFetchMaxWaitMs?: number;
  /** Where a partition paused on an undecodable batch is reported (degraded, see ./undecodable). */
  health?: ComponentHealth;
  /** Where the undecodable-batch metrics are registered. */
  registry?: Registry;
  /** The name /health gives this consumer (default `consumer:<groupId>`). */
  component?: string;
  /** ms between tries of a partition paused on an undecodable batch (default KEYFLOW_UNDECODABLE_RETRY_MS, 60 000). */
  undecodableRetryMs?: number;
  /**
   * A message whose handler keeps rejecting (an infrastructure outage: registry, Redis, broker) is named in /health
   * as degraded after this many ms of retries (default 30 000), until it is handled.
   */
  retryingDegradedAfterMs?: number;
}

/** The options with every default filled in (see {@link resolveOptions}). */
export type Resolved = Required<Omit<OrderedConsumerOptions, 'infraRetry' | 'health' | 'registry'>> & {
  infraRetry: BackoffPolicy;
  health?: ComponentHealth;
  registry?: Registry;
};

/** `opts` with the defaults of every option it leaves out. */
export function resolveOptions(opts: OrderedConsumerOptions): Resolved {
  return {
    fromBeginning: true,
    maxInFlightPerPartition: 32,
    maxInFlight: 128,
    partitionsConsumedConcurrently: 4,
    sessionTimeoutMs: 30_000,
    heartbeatIntervalMs: 3_000,
    rebalanceTimeoutMs: 60_000,
    commitIntervalMs: 1_000,
    maxBytesPerPartition: 1024 * 1024,
    fetchMaxWaitMs: 100,
    idleFetchMaxWaitMs: 500,
    component: `consumer:${opts.groupId}`,
    undecodableRetryMs: UNDECODABLE_RETRY_MS,
    retryingDegradedAfterMs: 30_000,
    ...opts,
    infraRetry: opts.infraRetry ?? DEFAULT_INFRA_BACKOFF,
  };
}
