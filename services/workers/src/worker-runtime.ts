import type Redis from 'ioredis';
import {
  claimCheckFromConfig,
  createBlobStore,
  startBlobSweeper,
  type BlobStore,
  type ClaimCheck,
} from '@keyflow/blobs';
import { EventCodec } from '@keyflow/contracts';
import { createRedis, IdempotencyStore, idempotencyKeyPrefix } from '@keyflow/idempotency';
import {
  assertGroupIdMigrated,
  BatchingProducer,
  connectUntilAnswered,
  createIdempotentProducer,
  createKafka,
  ensureTopics,
  OrderedConsumer,
  watchProducer,
  type Kafka,
  type Producer,
} from '@keyflow/kafka';
import { alignDlqLimits, dlqTopicConfigs, dlqTopicFor } from '@keyflow/ops';
import { taskTopic, Topic, type TaskTopic } from '@keyflow/schemas';
import { ComponentHealth, type Logger, type Registry } from '@keyflow/observability';
import type { WorkerConfig } from './config';
import {
  EXECUTOR_REDIS_OPTIONS,
  FlowLimiter,
  IdempotencyStoreHealth,
  TaskExecutor,
  workerMetrics,
  type EventPublisher,
  type IdempotencyHealth,
  type StoredOutcome,
  type WorkerMetrics,
} from '@keyflow/task-runtime';
import type { TaskHandlerFn } from '@keyflow/handler';

export {
  IDEMPOTENCY_STORE_FULL_CONDITION,
  type EvictionHealth,
  type IdempotencyHealth,
} from '@keyflow/task-runtime';

/** Names of the worker's parts that must keep running, as /health and the fatal log line name them. */
export const WORKER_COMPONENTS = {
  /** The ordered consumer of the task topics. */
  taskConsumer: 'task consumer',
  /** The producer of results (task.results), DLQ records and handler events. */
  resultProducer: 'result producer',
  /** The idempotency store's Redis: failed for good when its maxmemory-policy evicts keys (not allowed). */
  idempotencyStore: 'idempotency store',
} as const;

/** Longest wait at startup for Redis to answer the eviction-policy check before tasks are consumed, in ms. */
const REDIS_CHECK_WAIT_MS = 10_000;

/**
 * The worker's runtime, wired in one place (as the orchestrator's is in its runtime.ts): {@link start} takes the
 * task handlers (by task type) and, in named steps, creates the topics, registers the schemas, connects the result
 * producer and the idempotency store's Redis, attaches the event publisher, starts the blob sweeper, builds the
 * task executor and starts the ordered consumer of the task topics (per-key order, bounded in-flight, prefix
 * commits) with its gauges. The NestJS transport (KafkaTaskTransport) is a thin adapter on top.
 */
export class TaskWorker {
  /** Parts that failed for good (see WORKER_COMPONENTS); the bootstrap exits the process on the first one. */
  readonly health = new ComponentHealth();
  private readonly metrics: WorkerMetrics;
  private readonly claimCheck: ClaimCheck;
  private readonly store: IdempotencyStoreHealth;
  private kafka?: Kafka;
  private producer?: Producer;
  private redis?: Redis;
  /** Flow control of the limited task types (WORKER_FLOW_LIMITS), on its own Redis connection. */
  private flow?: { limiter: FlowLimiter; redis: Redis };
  /** The ordered consumer of the task topics, once started. */
  consumer?: OrderedConsumer;
  private gaugeTimer?: NodeJS.Timeout;
  private stopSweeper?: () => Promise<void>;
  private crashListeners: Array<(e: Error) => void> = [];

  constructor(
    private readonly cfg: WorkerConfig,
    private readonly log: Logger,
    private readonly registry: Registry,
    private readonly publisher?: EventPublisher,
    /** The claim-check store (default: the one the configuration selects). */
    readonly blobs: BlobStore = createBlobStore(cfg),
  ) {
    this.metrics = workerMetrics(registry);
    this.claimCheck = claimCheckFromConfig(cfg, blobs);
    this.store = new IdempotencyStoreHealth(
      this.health,
      log,
      cfg.WORKER_IDEMPOTENCY_ALLOW_EVICTION,
      WORKER_COMPONENTS.idempotencyStore,
    );
  }

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
    return this.store.report();
  }

  /** The ordered consumer's counters (undefined before it started). */
  stats() {
    return this.consumer?.stats();
  }

  /**
   * Starts consuming the task topics of `handlers` (all of them, or WORKER_TASK_TYPES).
   * @throws Error when no handler is given, or WORKER_TASK_TYPES names a type without one; a Kafka, registry or
   *   Redis error when a part cannot start; IdempotencyStoreEvictsError when Redis evicts keys (not allowed)
   */
  async start(handlers: Map<string, TaskHandlerFn>): Promise<void> {
    const taskTopics = this.taskTypes(handlers).map(taskTopic);
    const codec = new EventCodec({ ...this.cfg.registry, topicPrefix: this.cfg.KEYFLOW_TOPIC_PREFIX });
    this.kafka = createKafka({
      brokers: this.cfg.brokers,
      clientId: `keyflow-worker-${process.pid}`,
      logger: this.log,
      security: this.cfg.kafkaSecurity,
    });
    await this.prepareTopics(codec, taskTopics);
    await codec.registerTopics([Topic.TASK_RESULTS, ...taskTopics]);
    const producer = await this.connectResultProducer();
    const store = await this.connectIdempotencyStore();
    // Requests of at most half of max.message.bytes (the claim check's threshold; KEYFLOW_MAX_MESSAGE_BYTES).
    const results = new BatchingProducer(producer, { maxBytes: this.claimCheck.thresholdBytes });
    this.attachPublisher(codec, results);
    this.startBlobSweeper();
    this.warnPartitionSlots();
    const executor = new TaskExecutor({
      codec,
      producer,
      results,
      store,
      claimCheck: this.claimCheck,
      handlers,
      logger: this.log,
      metrics: this.metrics,
      groupId: this.cfg.WORKER_GROUP_ID,
      retry: { initialDelayMs: this.cfg.WORKER_RETRY_INITIAL_MS, maxDelayMs: this.cfg.WORKER_RETRY_MAX_MS },
      maxConcurrentHandlers: this.cfg.WORKER_MAX_CONCURRENT_HANDLERS,
      maxHandlersPerPartition: this.cfg.WORKER_MAX_HANDLERS_PER_PARTITION,
      flow: this.startFlowControl(),
      flowWaitReportMs: this.cfg.WORKER_FLOW_WAIT_REPORT_MS,
    });
    this.consumer = this.taskConsumer(codec, taskTopics, executor);
    this.startGauges(executor);
    await this.consumer.start();
    this.log.info(
      { groupId: this.cfg.WORKER_GROUP_ID, topics: taskTopics, prefix: this.cfg.KEYFLOW_TOPIC_PREFIX },
      'worker consuming',
    );
  }

  /** The task types to consume: WORKER_TASK_TYPES, else those of `handlers`. @throws Error (see {@link start}) */
  private taskTypes(handlers: Map<string, TaskHandlerFn>): string[] {
    const types = this.cfg.taskTypes.length ? this.cfg.taskTypes : [...handlers.keys()];
    if (types.length === 0)
      throw new Error('no task handlers registered (@TaskHandler) and WORKER_TASK_TYPES is empty');
    const missing = types.filter((t) => !handlers.has(t));
    if (missing.length)
      throw new Error(`WORKER_TASK_TYPES names types without a handler: ${missing.join(', ')}`);
    return types;
  }

  /**
   * Creates task.results, the task topics and their DLQs when missing, aligns the DLQs' size limits with their
   * sources, and refuses a group id of an earlier version that was not migrated.
   */
  private async prepareTopics(codec: EventCodec, taskTopics: TaskTopic[]): Promise<void> {
    const admin = this.kafka!.admin();
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
  }

  /** The idempotent producer of results, DLQ records and events: failing for good fails the worker. */
  private async connectResultProducer(): Promise<Producer> {
    this.producer = watchProducer(createIdempotentProducer(this.kafka!), (err) =>
      this.health.fail(WORKER_COMPONENTS.resultProducer, err),
    );
    await connectUntilAnswered(this.producer, { what: 'result producer', logger: this.log });
    return this.producer;
  }

  /**
   * The idempotency store on its Redis, checked at every (re)connection (persistence, eviction policy). No task
   * before the eviction policy is known to be safe, when Redis answers within REDIS_CHECK_WAIT_MS (later
   * connections check too). @throws IdempotencyStoreEvictsError (see IdempotencyStoreHealth.checkEviction)
   */
  private async connectIdempotencyStore(): Promise<IdempotencyStore<StoredOutcome>> {
    // No offline queue: while Redis is away, calls fail at once (retryable) and the consumer holds its messages.
    const redis = (this.redis = createRedis(this.cfg.redis, EXECUTOR_REDIS_OPTIONS));
    redis.on('error', (err) => this.log.warn({ err: err.message }, 'redis connection error'));
    // At every (re)connection: a Redis replaced by one without persistence, or with an evicting policy, is noticed too.
    let firstCheck!: (refused: Error | undefined) => void;
    const checked = new Promise<Error | undefined>((resolve) => (firstCheck = resolve));
    redis.on('ready', () => {
      void this.store.checkPersistence(redis);
      void this.store.checkEviction(redis).then(firstCheck);
    });
    const store = new IdempotencyStore<StoredOutcome>(redis, {
      keyPrefix: idempotencyKeyPrefix(this.cfg.KEYFLOW_TOPIC_PREFIX),
      leaseMs: this.cfg.WORKER_LEASE_MS,
      completionTtlMs: this.cfg.WORKER_COMPLETION_TTL_MS,
      onFullChange: (err) => this.store.onStoreFull(err),
    });
    let waited: NodeJS.Timeout | undefined;
    const refused = await Promise.race([
      checked,
      new Promise<undefined>(
        (resolve) => (waited = setTimeout(() => resolve(undefined), REDIS_CHECK_WAIT_MS)),
      ),
    ]);
    clearTimeout(waited);
    if (refused) throw refused;
    return store;
  }

  /** The handlers' EventPublisher sends through `results`, creating an event's topic on its first use. */
  private attachPublisher(codec: EventCodec, results: BatchingProducer): void {
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
  }

  /** Deletes expired blobs every WORKER_BLOB_SWEEP_MS (0: never). */
  private startBlobSweeper(): void {
    if (this.cfg.WORKER_BLOB_SWEEP_MS > 0)
      this.stopSweeper = startBlobSweeper(this.blobs, {
        intervalMs: this.cfg.WORKER_BLOB_SWEEP_MS,
        onSweep: (keys, err) =>
          err
            ? this.log.warn({ err }, 'blob sweep failed; trying again at the next period')
            : keys.length && this.log.info({ deleted: keys.length }, 'expired blobs deleted'),
      });
  }

  /** Warns when one partition's tasks can take every handler slot. */
  private warnPartitionSlots(): void {
    if (
      Math.min(this.cfg.WORKER_MAX_HANDLERS_PER_PARTITION, this.cfg.WORKER_MAX_IN_FLIGHT_PER_PARTITION) >=
      this.cfg.WORKER_MAX_CONCURRENT_HANDLERS
    )
      this.log.warn(
        {
          WORKER_MAX_HANDLERS_PER_PARTITION: this.cfg.WORKER_MAX_HANDLERS_PER_PARTITION,
          WORKER_MAX_IN_FLIGHT_PER_PARTITION: this.cfg.WORKER_MAX_IN_FLIGHT_PER_PARTITION,
          WORKER_MAX_CONCURRENT_HANDLERS: this.cfg.WORKER_MAX_CONCURRENT_HANDLERS,
        },
        'one partition can hold every handler slot: a partition whose handlers hang stalls the others (set WORKER_MAX_HANDLERS_PER_PARTITION lower)',
      );
  }

  /** The ordered consumer of the task topics, handing each message to `executor`; its crash fails the worker. */
  private taskConsumer(codec: EventCodec, taskTopics: TaskTopic[], executor: TaskExecutor): OrderedConsumer {
    const consumer = new OrderedConsumer({
      kafka: this.kafka!,
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
    consumer.onCrash((e) => {
      this.health.fail(WORKER_COMPONENTS.taskConsumer, e);
      this.crashListeners.forEach((l) => l(e));
    });
    return consumer;
  }

  /**
   * The flow limiter of WORKER_FLOW_LIMITS (undefined without limits), on a connection of its own to
   * WORKER_FLOW_REDIS_URL (default REDIS_URL) without offline queue: while it is away, admissions fail at once and
   * the waiting tasks keep waiting (see FlowLimiter).
   */
  private startFlowControl(): FlowLimiter | undefined {
    if (Object.keys(this.cfg.WORKER_FLOW_LIMITS).length === 0) return undefined;
    const url = this.cfg.WORKER_FLOW_REDIS_URL ?? this.cfg.redis.url;
    const redis = createRedis(
      { url, options: this.cfg.redis.options },
      { enableOfflineQueue: false, maxRetriesPerRequest: 1, retryStrategy: (n) => Math.min(50 * n, 1_000) },
    );
    redis.on('error', (err) => this.log.debug({ err: err.message }, 'flow limit redis connection error'));
    const limiter = new FlowLimiter({
      redis,
      limits: this.cfg.WORKER_FLOW_LIMITS,
      topicPrefix: this.cfg.KEYFLOW_TOPIC_PREFIX,
      leaseMs: this.cfg.WORKER_FLOW_LEASE_MS,
      logger: this.log,
      metrics: {
        waiting: this.metrics.flowWaiting,
        admitted: this.metrics.flowAdmitted,
        storeErrors: this.metrics.flowStoreErrors,
      },
    });
    this.flow = { limiter, redis };
    this.log.info({ limits: this.cfg.WORKER_FLOW_LIMITS }, 'flow control on');
    return limiter;
  }

  /** Tasks waiting for their flow-control admission in this process, by limited task type. */
  flowWaiting(): Record<string, number> {
    return this.flow?.limiter.waiting() ?? {};
  }

  /** Sets the in-flight, paused-partition and handler-slot gauges every second. */
  private startGauges(executor: TaskExecutor): void {
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
  }

  /** SIGTERM path: stop fetching, drain in-flight tasks up to the deadline, commit, disconnect. */
  async close(): Promise<void> {
    clearInterval(this.gaugeTimer);
    await this.consumer?.stop(this.cfg.WORKER_DRAIN_DEADLINE_MS);
    await this.producer?.disconnect().catch(() => undefined);
    this.redis?.disconnect();
    this.flow?.limiter.close();
    this.flow?.redis.disconnect();
    await this.stopSweeper?.();
    await this.blobs.close().catch(() => undefined);
    this.log.info('worker stopped');
  }
}
