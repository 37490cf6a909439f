import type Redis from 'ioredis';
import { isObservable, lastValueFrom } from 'rxjs';
import { Server, type CustomTransportStrategy } from '@nestjs/microservices';
import type { Kafka, Producer } from '@keyflow/kafka';
import {
  claimCheckFromConfig,
  createBlobStore,
  type ClaimCheck,
  startBlobSweeper,
  type BlobStore,
} from '@keyflow/blobs';
import { EventCodec } from '@keyflow/contracts';
import {
  checkRedisMemoryPolicy,
  checkRedisPersistence,
  requireNoEviction,
  type IdempotencyStoreFullError,
  createRedis,
  IdempotencyStore,
  idempotencyKeyPrefix,
  type RedisPersistence,
} from '@keyflow/idempotency';
import {
  alignDlqLimits,
  assertGroupIdMigrated,
  dlqTopicConfigs,
  BatchingProducer,
  createIdempotentProducer,
  createKafka,
  dlqTopicFor,
  ensureTopics,
  OrderedConsumer,
  watchProducer,
  connectUntilAnswered,
} from '@keyflow/kafka';
import { ComponentHealth, type Logger, type Registry } from '@keyflow/observability';
import type { WorkerConfig } from '../config';
import {
  TaskExecutor,
  type StoredOutcome,
  type TaskContext,
  type TaskHandlerFn,
} from '../runtime/task-executor';
import { workerMetrics, type WorkerMetrics } from '../runtime/metrics';
import { checkedByContract } from '../runtime/contract-check';
import { CONTRACT_EXTRA } from './task-handler.decorator';
import type { AnyTaskContract } from '@keyflow/workflow';
import type { EventPublisher } from '../runtime/event-publisher';
import { taskTopic, Topic } from '@keyflow/schemas';

/** Names of the worker's parts that must keep running, as /health and the fatal log line name them. */
export const WORKER_COMPONENTS = {
  /** The ordered consumer of the task topics. */
  taskConsumer: 'task consumer',
  /** The producer of results (task.results), DLQ records and handler events. */
  resultProducer: 'result producer',
  /** The idempotency store's Redis: failed for good when its maxmemory-policy evicts keys (not allowed). */
  idempotencyStore: 'idempotency store',
} as const;

/** The degraded condition of a noeviction Redis at its memory limit (code IDEMPOTENCY_STORE_FULL). */
export const IDEMPOTENCY_STORE_FULL_CONDITION = 'idempotency-store-full';

/** Longest wait at startup for Redis to answer the eviction-policy check before tasks are consumed, in ms. */
const REDIS_CHECK_WAIT_MS = 10_000;

/** What /health says about the idempotency store's Redis (see checkRedisPersistence). */
export type IdempotencyHealth = (
  | (Pick<RedisPersistence, 'durable' | 'reason' | 'snapshotIntervalS'> & { aof: boolean; checkedAt: number })
  | { durable: null; reason: string }
) & { eviction?: EvictionHealth };

/**
 * What /health says about the idempotency store's maxmemory-policy (see checkRedisMemoryPolicy): `allowed` false
 * means the worker failed for good over it (component `idempotency store`).
 */
export interface EvictionHealth {
  policy: string;
  evicts: boolean;
  allowed: boolean;
  /** maxmemory in bytes (0: no limit). */
  maxmemoryBytes: number;
  reason: string;
}

/**
 * A custom transport strategy of @nestjs/microservices: NestJS handlers declared with @TaskHandler(type) consume
 * `task.<type>` topics through the ordered consumer (per-key order, bounded in-flight, prefix commits), with the
 * idempotency store, in-process retries, timeouts, result events on `task.results` and the DLQ.
 */
export class KafkaTaskTransport extends Server implements CustomTransportStrategy {
  private kafka?: Kafka;
  private producer?: Producer;
  private redis?: Redis;
  private consumer?: OrderedConsumer;
  private readonly metrics: WorkerMetrics;
  private gaugeTimer?: NodeJS.Timeout;
  private crashListeners: Array<(e: Error) => void> = [];
  /** Parts that failed for good (see WORKER_COMPONENTS); the bootstrap exits the process on the first one. */
  readonly health = new ComponentHealth();
  private persistence: IdempotencyHealth = { durable: null, reason: 'not checked yet (Redis not ready)' };

  constructor(
    private readonly cfg: WorkerConfig,
    private readonly log: Logger,
    private readonly registry: Registry,
    private readonly publisher?: EventPublisher,
    /** The claim-check store (default: the one the configuration selects). */
    readonly blobs: BlobStore = createBlobStore(cfg),
  ) {
    super();
    this.metrics = workerMetrics(registry);
    this.claimCheck = claimCheckFromConfig(cfg, blobs);
  }
  private readonly claimCheck: ClaimCheck;
  private stopSweeper?: () => Promise<void>;

  /** Called with the error when the consumer dies for good: the process should exit non-zero. */
  onCrash(listener: (e: Error) => void): void {
    this.crashListeners.push(listener);
  }

  /** False before the consumer started, once it crashed, or once the result producer failed for good. */
  healthy(): boolean {
    return (this.consumer?.healthy() ?? false) && this.health.healthy;
  }

  /**
   * Whether the idempotency records' Redis persists them and whether it evicts them: checked at each (re)connection.
   */
  idempotency(): IdempotencyHealth {
    return this.eviction ? { ...this.persistence, eviction: this.eviction } : this.persistence;
  }

  private eviction?: EvictionHealth;

  /**
   * Asks Redis what it does at its memory limit. An evicting policy (anything but noeviction) fails the worker for good
   * (component `idempotency store`, code IDEMPOTENCY_STORE_EVICTS: /health 503, exit 1) unless
   * WORKER_IDEMPOTENCY_ALLOW_EVICTION; resolves with that error, or undefined. A check Redis does not answer is
   * logged and left to the next connection.
   */
  private async checkEviction(redis: Redis): Promise<Error | undefined> {
    try {
      const p = await checkRedisMemoryPolicy(redis);
      const allowed = this.cfg.WORKER_IDEMPOTENCY_ALLOW_EVICTION;
      this.eviction = {
        policy: p.policy,
        evicts: p.evicts,
        allowed: !p.evicts || allowed,
        maxmemoryBytes: p.maxmemoryBytes,
        reason: !p.evicts
          ? 'maxmemory-policy noeviction: records and fences are never evicted; at maxmemory writes are refused (/health degraded, IDEMPOTENCY_STORE_FULL)'
          : `maxmemory-policy ${p.policy} evicts keys at maxmemory: records and fences may vanish and steps run again` +
            (allowed ? ' (accepted: WORKER_IDEMPOTENCY_ALLOW_EVICTION=true)' : ''),
      };
      try {
        requireNoEviction(p, allowed);
      } catch (e) {
        this.health.fail(WORKER_COMPONENTS.idempotencyStore, e);
        return e as Error;
      }
      if (p.evicts) this.log.warn({ eviction: this.eviction }, this.eviction.reason);
    } catch (err) {
      this.log.warn({ err }, "could not check the idempotency store's maxmemory-policy");
    }
    return undefined;
  }

  /** A noeviction Redis at maxmemory refuses the store's writes: degraded while it lasts, logged once each way. */
  private onStoreFull(err: IdempotencyStoreFullError | null): void {
    if (err) {
      this.health.degrade(IDEMPOTENCY_STORE_FULL_CONDITION, { code: err.code, error: err.message });
      this.log.error(
        { code: err.code, err: err.message },
        'idempotency store full: tasks wait until Redis has room',
      );
    } else {
      this.health.recover(IDEMPOTENCY_STORE_FULL_CONDITION);
      this.log.info('idempotency store accepts writes again');
    }
  }

  /**
   * Asks Redis whether it persists (AOF or RDB snapshots) and warns when it persists nothing: a Redis restart would
   * then forget completion records, and redelivered tasks would run again. Never fails the worker.
   */
  private async checkPersistence(redis: Redis): Promise<void> {
    try {
      const p = await checkRedisPersistence(redis);
      this.persistence = {
        durable: p.durable,
        reason: p.reason,
        aof: p.aof,
        ...(p.snapshotIntervalS === undefined ? {} : { snapshotIntervalS: p.snapshotIntervalS }),
        checkedAt: Date.now(),
      };
      if (p.durable) this.log.info({ idempotency: p }, 'idempotency store persists its records');
      else
        this.log.warn(
          { idempotency: p },
          `idempotency store (Redis) persists nothing: ${p.reason}. Run it with appendonly yes (infra/local/stack.sh does)`,
        );
    } catch (err) {
      this.persistence = { durable: null, reason: `check failed: ${(err as Error).message}` };
      this.log.warn({ err }, 'could not check whether the idempotency store persists');
    }
  }

  stats() {
    return this.consumer?.stats();
  }

  async listen(callback: (err?: unknown) => void): Promise<void> {
    try {
      await this.start();
      callback();
    } catch (e) {
      callback(e);
    }
  }

  private async start(): Promise<void> {
    const handlers = new Map<string, TaskHandlerFn>();
    for (const [pattern, h] of this.getHandlers()) {
      // Nest's handler answers a value or an Observable (an interceptor's); only the latter needs rxjs.
      const run: TaskHandlerFn = async (input, ctx: TaskContext) => {
        const out: unknown = await h(input, ctx);
        return isObservable(out) ? lastValueFrom(out, { defaultValue: null }) : out;
      };
      const contract = h.extras?.[CONTRACT_EXTRA] as AnyTaskContract | undefined;
      handlers.set(pattern, contract ? checkedByContract(contract, run) : run);
    }
    const types = this.cfg.taskTypes.length ? this.cfg.taskTypes : [...handlers.keys()];
    if (types.length === 0)
      throw new Error('no task handlers registered (@TaskHandler) and WORKER_TASK_TYPES is empty');
    const missing = types.filter((t) => !handlers.has(t));
    if (missing.length)
      throw new Error(`WORKER_TASK_TYPES names types without a handler: ${missing.join(', ')}`);

    const codec = new EventCodec({ ...this.cfg.registry, topicPrefix: this.cfg.KEYFLOW_TOPIC_PREFIX });
    const taskTopics = types.map(taskTopic);
    this.kafka = createKafka({
      brokers: this.cfg.brokers,
      clientId: `keyflow-worker-${process.pid}`,
      logger: this.log,
      security: this.cfg.kafkaSecurity,
    });
    const admin = this.kafka.admin();
    await connectUntilAnswered(admin, { what: 'worker admin', logger: this.log });
    try {
      await ensureTopics(admin, [
        {
          topic: codec.physical(Topic.TASK_RESULTS),
          partitions: this.cfg.WORKER_RESULT_PARTITIONS,
          ...codec.replication(Topic.TASK_RESULTS),
        },
        ...taskTopics.flatMap((t) => [
          { topic: codec.physical(t), partitions: this.cfg.WORKER_TASK_PARTITIONS, ...codec.replication(t) },
          {
            topic: dlqTopicFor(codec.physical(t)),
            partitions: 1,
            ...codec.replication(t),
            configs: dlqTopicConfigs(this.cfg.KEYFLOW_MAX_MESSAGE_BYTES, this.cfg.WORKER_COMPLETION_TTL_MS),
          },
        ]),
      ]);
      // Every command its task topic accepts must fit in the DLQ with its triage headers (DLQs made before, or by
      // others, included).
      await alignDlqLimits(
        admin,
        taskTopics.map((t) => ({ source: codec.physical(t), dlq: dlqTopicFor(codec.physical(t)) })),
        this.log,
        // Its records are deleted before the completion records and fences of their commands expire.
        this.cfg.WORKER_COMPLETION_TTL_MS,
      );
      await assertGroupIdMigrated(admin, {
        service: 'workers',
        topicPrefix: this.cfg.KEYFLOW_TOPIC_PREFIX,
        groupId: this.cfg.WORKER_GROUP_ID,
        setting: 'WORKER_GROUP_ID',
        topics: taskTopics.map((t) => codec.physical(t)),
      });
    } finally {
      await admin.disconnect();
    }
    await codec.registerTopics([Topic.TASK_RESULTS, ...taskTopics]);

    this.producer = watchProducer(createIdempotentProducer(this.kafka), (err) =>
      this.health.fail(WORKER_COMPONENTS.resultProducer, err),
    );
    await connectUntilAnswered(this.producer, { what: 'result producer', logger: this.log });
    // No offline queue: while Redis is away, calls fail at once (retryable) and the consumer holds its messages.
    this.redis = createRedis(this.cfg.redis, {
      enableOfflineQueue: false,
      enableAutoPipelining: true, // concurrent tasks' lease calls share round trips
      maxRetriesPerRequest: 1,
      retryStrategy: (n) => Math.min(50 * n, 1_000),
    });
    this.redis.on('error', (err) => this.log.warn({ err: err.message }, 'redis connection error'));
    // At every (re)connection: a Redis replaced by one without persistence, or with an evicting policy, is noticed too.
    let firstCheck!: (refused: Error | undefined) => void;
    const checked = new Promise<Error | undefined>((resolve) => (firstCheck = resolve));
    this.redis.on('ready', () => {
      void this.checkPersistence(this.redis!);
      void this.checkEviction(this.redis!).then(firstCheck);
    });
    const store = new IdempotencyStore<StoredOutcome>(this.redis, {
      keyPrefix: idempotencyKeyPrefix(this.cfg.KEYFLOW_TOPIC_PREFIX),
      leaseMs: this.cfg.WORKER_LEASE_MS,
      completionTtlMs: this.cfg.WORKER_COMPLETION_TTL_MS,
      onFullChange: (err) => this.onStoreFull(err),
    });
    // No task before the eviction policy is known to be safe (when Redis answers in time; later connections check too).
    let waited: NodeJS.Timeout | undefined;
    const refused = await Promise.race([
      checked,
      new Promise<undefined>(
        (resolve) => (waited = setTimeout(() => resolve(undefined), REDIS_CHECK_WAIT_MS)),
      ),
    ]);
    clearTimeout(waited);
    if (refused) throw refused;
    // Requests of at most half of max.message.bytes (the claim check's threshold; KEYFLOW_MAX_MESSAGE_BYTES).
    const results = new BatchingProducer(this.producer, { maxBytes: this.claimCheck.thresholdBytes });
    this.publisher?.attach(codec, results, async (logical) => {
      const a = this.kafka!.admin();
      await connectUntilAnswered(a, { what: 'worker admin', logger: this.log });
      try {
        await ensureTopics(a, [
          {
            topic: codec.physical(logical),
            partitions: this.cfg.WORKER_TASK_PARTITIONS,
            ...codec.replication(logical),
          },
        ]);
      } finally {
        await a.disconnect();
      }
    });
    if (this.cfg.WORKER_BLOB_SWEEP_MS > 0)
      this.stopSweeper = startBlobSweeper(this.blobs, {
        intervalMs: this.cfg.WORKER_BLOB_SWEEP_MS,
        onSweep: (keys, err) =>
          err
            ? this.log.warn({ err }, 'blob sweep failed; trying again at the next period')
            : keys.length && this.log.info({ deleted: keys.length }, 'expired blobs deleted'),
      });
    if (this.cfg.WORKER_MAX_IN_FLIGHT_PER_PARTITION >= this.cfg.WORKER_MAX_CONCURRENT_HANDLERS)
      this.log.warn(
        {
          WORKER_MAX_IN_FLIGHT_PER_PARTITION: this.cfg.WORKER_MAX_IN_FLIGHT_PER_PARTITION,
          WORKER_MAX_CONCURRENT_HANDLERS: this.cfg.WORKER_MAX_CONCURRENT_HANDLERS,
        },
        'one partition can hold every handler slot: a partition whose handlers hang stalls the others (set the per-partition bound lower)',
      );
    const executor = new TaskExecutor({
      codec,
      producer: this.producer,
      results,
      store,
      claimCheck: this.claimCheck,
      handlers,
      logger: this.log,
      metrics: this.metrics,
      groupId: this.cfg.WORKER_GROUP_ID,
      retry: { initialDelayMs: this.cfg.WORKER_RETRY_INITIAL_MS, maxDelayMs: this.cfg.WORKER_RETRY_MAX_MS },
      maxConcurrentHandlers: this.cfg.WORKER_MAX_CONCURRENT_HANDLERS,
    });
    this.consumer = new OrderedConsumer({
      kafka: this.kafka,
      groupId: this.cfg.WORKER_GROUP_ID,
      topics: taskTopics.map((t) => codec.physical(t)),
      logger: this.log,
      handle: (m, ctx) => executor.handle(m, ctx),
      maxInFlight: this.cfg.WORKER_MAX_IN_FLIGHT,
      maxInFlightPerPartition: this.cfg.WORKER_MAX_IN_FLIGHT_PER_PARTITION,
      partitionsConsumedConcurrently: this.cfg.WORKER_PARTITIONS_CONCURRENTLY,
      fetchMaxWaitMs: this.cfg.WORKER_FETCH_MAX_WAIT_MS,
      sessionTimeoutMs: this.cfg.WORKER_SESSION_TIMEOUT_MS,
      heartbeatIntervalMs: this.cfg.WORKER_HEARTBEAT_INTERVAL_MS,
      component: WORKER_COMPONENTS.taskConsumer,
      health: this.health,
      registry: this.registry,
    });
    this.consumer.onCrash((e) => {
      this.health.fail(WORKER_COMPONENTS.taskConsumer, e);
      this.crashListeners.forEach((l) => l(e));
    });
    this.gaugeTimer = setInterval(() => {
      const s = this.consumer?.stats();
      if (!s) return;
      this.metrics.inFlight.set(s.inFlight);
      this.metrics.pausedPartitions.set(s.pausedPartitions);
      const handlers = executor.handlerStats();
      this.metrics.handlersRunning.set(handlers.running);
      this.metrics.handlersWaiting.set(handlers.waiting);
    }, 1_000);
    this.gaugeTimer.unref();
    await this.consumer.start();
    this.log.info(
      { groupId: this.cfg.WORKER_GROUP_ID, topics: taskTopics, prefix: this.cfg.KEYFLOW_TOPIC_PREFIX },
      'worker consuming',
    );
  }

  /** SIGTERM path: stop fetching, drain in-flight tasks up to the deadline, commit, disconnect. */
  async close(): Promise<void> {
    clearInterval(this.gaugeTimer);
    await this.consumer?.stop(this.cfg.WORKER_DRAIN_DEADLINE_MS);
    await this.producer?.disconnect().catch(() => undefined);
    this.redis?.disconnect();
    await this.stopSweeper?.();
    await this.blobs.close().catch(() => undefined);
    this.log.info('worker stopped');
  }

  on(): void {
    // No transport events beyond onCrash.
  }

  unwrap<T>(): T {
    return this.consumer as T;
  }
}
