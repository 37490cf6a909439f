import { randomUUID } from 'node:crypto';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import {
  CompressionTypes,
  KafkaJSError,
  JavaCompatiblePartitioner,
  messageBytes,
  type Consumer,
  type IHeaders,
  type EachBatchPayload,
  type Kafka,
  type Producer,
  writeCompression,
} from '@keyflow/kafka';
import {
  BlobError,
  claimCheckFromConfig,
  PayloadTooLargeError,
  WF_EVENTS_RETENTION_MS,
  type ClaimCheck,
  supersededExpiry,
} from '@keyflow/blobs';
import { ContractError, derivedEventId, newMetadata, type EventCodec } from '@keyflow/contracts';
import {
  dlqMessage,
  assertCoPartitioned,
  assertGroupIdMigrated,
  coPartitionedAssigner,
  createIdempotentProducer,
  dlqTopicFor,
  ensureTopics,
  subscribeWhenReady,
  UndecodableBatchError,
  PartitionQuarantine,
  undecodableAt,
  watchProducer,
  type TopicSpec,
  connectUntilAnswered,
  alignDlqLimits,
  dlqTopicConfigs,
  fitDlqRecord,
  dlqLimitBytes,
  TRANSACTIONAL_RETRY,
  whileTransactionsConcurrent,
} from '@keyflow/kafka';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import {
  ComponentHealth,
  contextFromRecord,
  SpanLinks,
  spanLinkLimit,
  traceContextOf,
  traceHeaders,
  tracer,
  type Logger,
  type TraceContext,
} from '@keyflow/observability';
import {
  backoffDelayMs,
  PendingRuns,
  retryPolicy,
  segmentKey,
  SIGNAL_BUFFER_FULL,
  isParkedStart,
  UNPARK_TIMER,
  type ParkedInput,
  type WorkflowDefinition,
  type WorkflowInput,
  type IgnoreReason,
  stepStateOf,
  TERMINAL,
  type Decision,
  type RunState,
} from '@keyflow/workflow';
import { KeyflowError } from '@keyflow/errors';
import type { OrchestratorConfig } from '../config';
import type { WorkflowRegistry } from '../workflows/registry';
import { dlqOf, taskTopic, Topic, type DlqTopic, type LogicalTopic } from '@keyflow/schemas';
import {
  encodeOutputs,
  encodeSnapshotRecords,
  resolveInput,
  forgottenRunBlobPrefixes,
  toWorkflowInput,
  type OutputRecord,
} from './mapping';
import { BARRIER_PREFIX, type RunReadModel } from './read-model';
import type { OrchestratorMetrics } from './metrics';
import { COMPONENTS } from './components';
import { TimerQueue, type DueTimer } from './timers';
import { stallConditionId, stalledPartitions } from './stalls';

/** The engine's input topics (logical): what it consumes, and what it dead-letters into `<topic>.dlq`. */
const ENGINE_INPUTS = [Topic.WF_REQUESTS, Topic.TASK_RESULTS] as const;

/** The spans of one engine batch (see Engine.tracedBatch). */
interface BatchSpans {
  batch: Span;
  /** The batch span's links to its inputs' traces, within the SDK's link limit. */
  links: SpanLinks;
  applied: Span[];
}

/** At most this many ended runs, and this many wf.state tombstones (cores and segments), per partition per sweep. */
const FORGET_RUNS_PER_SWEEP = 1_000;
const FORGET_RECORDS_PER_SWEEP = 20_000;
/** Tombstones per produce request of the sweep's transaction (~100 bytes each before gzip). */
const FORGET_RECORDS_PER_REQUEST = 2_000;
/** Runs a sweep looks at between two yields to the event loop. */
const FORGET_SCAN_YIELD = 10_000;

/** Backoff between take-overs of a partition whose take-over or transaction failed (full jitter). */
const TAKEOVER_RETRY = retryPolicy({
  maxAttempts: Number.MAX_SAFE_INTEGER,
  initialDelayMs: 500,
  maxDelayMs: 15_000,
});

interface OwnedPartition {
  partition: number;
  producer: Producer;
  runs: Map<string, RunState>;
  /** The durable timers of `runs`, in due order. */
  timers: TimerQueue;
  ready: Promise<void>;
  /**
   * Failed take-overs or transactions of this partition since its last commit, and when the first of them happened
   * (ms since epoch); carried over by a re-take-over.
   */
  failures: { count: number; since: number } | null;
  /** Serialises the batches of wf.requests and task.results of this partition (one transaction at a time). */
  lock: Promise<void>;
  revoked: boolean;
  /**
   * Per input topic, since when (ms since epoch) a batch of this partition has been waiting to be committed; absent
   * when none waits. What /health reads to name a stalled partition (ORCHESTRATOR_PARTITION_STALL_MS).
   */
  waitingSince: Map<string, number>;
  /**
   * Per running run, the trace context of its last applied input's span: what its timers fire continues that trace.
   * In memory only (a take-over starts empty: a timer fired before the run's next input starts a new trace).
   */
  traces: Map<string, TraceContext>;
}

/**
 * The engine. Consumes wf.requests and task.results (co-partitioned by run id; it refuses to start when their
 * partition counts differ) in one consumer group, applies the pure reducer, and for each batch of one partition
 * commits in ONE Kafka transaction: the task commands, the lifecycle events (wf.events), the run snapshots
 * (wf.state, compacted) and the consumer offsets (sendOffsets). Readers use read_committed. So each input's
 * effects are committed exactly once: a crash before the commit aborts everything and the batch is redelivered
 * against the state as it was (the in-memory state is only updated after the commit).
 *
 * Zombie fencing: one transactional producer per partition, transactional.id = `<group>-p<partition>` (the
 * pre-KIP-447 pattern; kafkajs does not send the consumer group metadata of KIP-447). A new owner's
 * initTransactions fences the previous owner's producer, then writes a barrier to wf.state and restores the
 * partition's runs from the read model once the barrier is read.
 *
 * Durable timers are part of the run state; a tick publishes TimerFired to wf.requests for due timers of owned
 * runs, processed like any other input (a duplicate TimerFired is stale and ignored).
 */
export class Engine {
  private consumer?: Consumer;
  private timerProducer?: Producer;
  private readonly owned = new Map<number, OwnedPartition>();
  private readonly assigned = new Set<number>();
  /** Links a batch span keeps (OTEL_SPAN_LINK_COUNT_LIMIT, as the SDK applies it), read once. */
  private readonly linkLimit = spanLinkLimit();
  private tick?: NodeJS.Timeout;
  /** The retention sweeps: one at a time, each starting ORCHESTRATOR_RETENTION_SWEEP_MS after the previous ended. */
  private retentionLoop?: Promise<void>;
  /** Wakes the retention loop's wait (at stop). */
  private wakeRetention?: () => void;
  private stallCheck?: NodeJS.Timeout;
  /** Partitions /health names as stalled. */
  private stalled = new Set<number>();
  private stopping = false;
  private crashed?: Error;
  private readonly quarantine: PartitionQuarantine;
  private crashListeners: Array<(e: Error) => void> = [];
  /** When the timer tick last named the parked runs in /health (reportParked), ms since epoch. */
  private parkedReportedAt = 0;

  constructor(
    private readonly cfg: OrchestratorConfig,
    private readonly kafka: Kafka,
    private readonly codec: EventCodec,
    private readonly registry: WorkflowRegistry,
    private readonly readModel: RunReadModel,
    private readonly logger: Logger,
    private readonly metrics: OrchestratorMetrics,
    /** Where consumer and producer failures for good are reported (COMPONENTS.engineConsumer / engineProducer). */
    readonly health: ComponentHealth = new ComponentHealth(),
    /** Size limits and the blob store of payloads too large for their topic (default: from the configuration). */
    private readonly claim: ClaimCheck = claimCheckFromConfig(cfg),
  ) {
    const owned = this.owned;
    metrics.setRunsSource(function* (this: void) {
      for (const o of owned.values()) yield* o.runs.values();
    });
    metrics.setParkedSource(() => this.parkedRuns().values());
    this.quarantine = new PartitionQuarantine({
      component: COMPONENTS.engineConsumer,
      logger,
      health,
      registry: metrics.registry,
      partitions: {
        pause: (topic, partition) => this.consumer?.pause([{ topic, partitions: [partition] }]),
        resume: (topic, partition) => {
          if (!this.stopping && this.assigned.has(partition))
            this.consumer?.resume([{ topic, partitions: [partition] }]);
        },
      },
    });
  }

  /** Logical topics the engine reads and writes, with the task topics its definitions use. */
  static topics(
    cfg: OrchestratorConfig,
    registry: WorkflowRegistry,
  ): Array<TopicSpec & { topic: LogicalTopic | DlqTopic }> {
    const taskTypes = new Set<string>();
    for (const name of registry.names()) {
      const def = registry.get(name)!;
      for (const s of def.stepIndex.values()) {
        if (s.kind === 'task' || s.kind === 'map') taskTypes.add(s.type);
        if (s.kind === 'task' && s.compensate) taskTypes.add(s.compensate.type);
      }
    }
    const n = cfg.ORCHESTRATOR_PARTITIONS;
    // A DLQ holds every record its source accepted plus triage headers (see dlqLimitBytes).
    const dlqConfigs = dlqTopicConfigs(cfg.KEYFLOW_MAX_MESSAGE_BYTES);
    return [
      { topic: Topic.WF_REQUESTS, partitions: n },
      { topic: Topic.TASK_RESULTS, partitions: n },
      { topic: Topic.WF_EVENTS, partitions: n, configs: { 'retention.ms': String(WF_EVENTS_RETENTION_MS) } },
      {
        topic: Topic.WF_STATE,
        partitions: n,
        configs: { 'cleanup.policy': 'compact', 'min.compaction.lag.ms': '60000' },
      },
      ...ENGINE_INPUTS.map((t) => ({ topic: dlqOf(t), partitions: 1, configs: dlqConfigs })),
      ...[...taskTypes].flatMap((t) => [
        { topic: taskTopic(t), partitions: cfg.TASK_PARTITIONS },
        { topic: dlqOf(taskTopic(t)), partitions: 1, configs: dlqConfigs },
      ]),
    ];
  }

  /** Called when the engine's consumer dies for good: the process should exit non-zero (a supervisor restarts it). */
  onCrash(listener: (e: Error) => void): void {
    this.crashListeners.push(listener);
  }

  /** False before start and once the consumer crashed or a producer failed for good. */
  healthy(): boolean {
    return this.consumer !== undefined && !this.crashed && this.health.healthy;
  }

  ownedPartitions(): number[] {
    return [...this.owned.keys()].sort((a, b) => a - b);
  }

  /**
   * Creates topics, checks co-partitioning, registers schemas, starts consuming.
   * @throws PartitionCountMismatchError when the run-keyed topics have different partition counts.
   */
  async start(): Promise<void> {
    const specs = Engine.topics(this.cfg, this.registry);
    const admin = this.kafka.admin();
    await connectUntilAnswered(admin, { what: 'engine admin', logger: this.logger });
    try {
      await ensureTopics(
        admin,
        specs.map((s) => ({ ...s, ...this.codec.replication(s.topic), topic: this.codec.physical(s.topic) })),
      );
      // Every record the engine's inputs accept must fit in their DLQs (which the engine writes) with triage headers.
      await alignDlqLimits(
        admin,
        ENGINE_INPUTS.map((t) => ({
          source: this.codec.physical(t),
          dlq: dlqTopicFor(this.codec.physical(t)),
        })),
        this.logger,
      );
      await assertCoPartitioned(
        admin,
        [Topic.WF_REQUESTS, Topic.TASK_RESULTS, Topic.WF_EVENTS, Topic.WF_STATE].map((t) =>
          this.codec.physical(t),
        ),
      );
      await assertGroupIdMigrated(admin, {
        service: 'orchestrator',
        topicPrefix: this.cfg.KEYFLOW_TOPIC_PREFIX,
        groupId: this.cfg.ORCHESTRATOR_GROUP_ID,
        setting: 'ORCHESTRATOR_GROUP_ID',
        topics: ENGINE_INPUTS.map((t) => this.codec.physical(t)),
      });
    } finally {
      await admin.disconnect();
    }
    await this.codec.registerTopics(
      specs.map((s) => s.topic).filter((t): t is LogicalTopic => !t.endsWith('.dlq')),
    );
    await this.readModel.start(); // before consuming: take-overs wait for it to read their barriers
    this.timerProducer = watchProducer(createIdempotentProducer(this.kafka), (err) =>
      this.health.fail(COMPONENTS.engineProducer, err),
    );
    await connectUntilAnswered(this.timerProducer, { what: 'engine timer producer', logger: this.logger });

    const c = this.kafka.consumer({
      groupId: this.cfg.ORCHESTRATOR_GROUP_ID,
      readUncommitted: false,
      sessionTimeout: this.cfg.ORCHESTRATOR_SESSION_TIMEOUT_MS,
      heartbeatInterval: Math.floor(this.cfg.ORCHESTRATOR_SESSION_TIMEOUT_MS / 5),
      maxWaitTimeInMs: this.cfg.ORCHESTRATOR_FETCH_MAX_WAIT_MS,
      // Partition p of wf.requests and of task.results on one member, sticky (round-robin splits them).
      partitionAssigners: [coPartitionedAssigner({ ownedPartitions: () => this.assigned })],
    });
    this.consumer = c;
    c.on(c.events.GROUP_JOIN, (e) => this.onAssignment(e.payload.memberAssignment));
    c.on(c.events.CRASH, (e) => {
      this.logger.error(
        {
          err: e.payload.error,
          restart: e.payload.restart,
          // kafkajs's fetch parser cannot say which partition an undecodable batch is on: one of these.
          ...(e.payload.error instanceof UndecodableBatchError
            ? { ownedPartitions: this.ownedPartitions() }
            : {}),
        },
        'engine consumer crashed',
      );
      if (!e.payload.restart) {
        this.crashed = e.payload.error;
        this.health.fail(COMPONENTS.engineConsumer, e.payload.error);
        this.crashListeners.forEach((l) => l(e.payload.error));
      }
    });
    await connectUntilAnswered(c, { what: 'engine consumer', logger: this.logger });
    await subscribeWhenReady(c, this.codec.physical(Topic.WF_REQUESTS), true);
    await subscribeWhenReady(c, this.codec.physical(Topic.TASK_RESULTS), true);
    await c.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: Math.max(2, this.cfg.ORCHESTRATOR_PARTITIONS * 2),
      eachBatch: (p) => this.onBatch(p),
    });
    this.tick = setInterval(() => void this.fireTimers(), this.cfg.ORCHESTRATOR_TIMER_TICK_MS);
    this.tick.unref();
    if (this.cfg.ORCHESTRATOR_RUN_RETENTION_MS > 0) this.retentionLoop = this.sweepRetention();
    const stall = this.cfg.ORCHESTRATOR_PARTITION_STALL_MS;
    this.stallCheck = setInterval(() => this.checkStalls(), Math.min(1_000, Math.max(100, stall / 4)));
    this.stallCheck.unref();
  }

  /**
   * Stops consuming, the timers and the retention sweeps, then disconnects the producers. A sweep in progress stops
   * between two runs (a tombstone transaction in flight is finished or aborted). Resolves within
   * ORCHESTRATOR_STOP_TIMEOUT_MS (ms) even when something does not answer: then it logs what was left, and what was
   * not committed is aborted by Kafka (transaction timeout, or fenced by the partition's next owner).
   */
  async stop(): Promise<void> {
    this.stopping = true;
    clearInterval(this.tick);
    clearInterval(this.stallCheck);
    this.wakeRetention?.();
    this.quarantine.close();
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<'timeout'>((r) => {
      timer = setTimeout(() => r('timeout'), this.cfg.ORCHESTRATOR_STOP_TIMEOUT_MS);
      timer.unref();
    });
    const graceful = (async () => {
      await this.retentionLoop;
      await this.consumer?.disconnect();
      await Promise.allSettled([...this.owned.values()].map((o) => o.producer.disconnect()));
      await this.timerProducer?.disconnect();
    })();
    try {
      if ((await Promise.race([graceful, bound])) === 'timeout')
        this.logger.warn(
          { timeoutMs: this.cfg.ORCHESTRATOR_STOP_TIMEOUT_MS, partitions: this.ownedPartitions() },
          'engine did not stop within ORCHESTRATOR_STOP_TIMEOUT_MS; leaving its uncommitted work to Kafka',
        );
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Names in /health (degraded, `PARTITION_STALLED`) each owned partition one of whose input batches has waited
   * longer than ORCHESTRATOR_PARTITION_STALL_MS to be committed (a take-over catching up, a transaction that does
   * not end); clears it once the partition commits again or is revoked.
   */
  private checkStalls(): void {
    const bound = this.cfg.ORCHESTRATOR_PARTITION_STALL_MS;
    const stalled = stalledPartitions(
      [...this.owned].map(([p, o]) => [p, o.waitingSince] as [number, Map<string, number>]),
      Date.now(),
      bound,
    );
    const now = new Set(stalled.map((s) => s.partition));
    for (const p of this.stalled) if (!now.has(p)) this.health.recover(stallConditionId(p));
    for (const { partition, waitedMs } of stalled)
      this.health.degrade(stallConditionId(partition), {
        code: 'PARTITION_STALLED',
        error: `partition ${partition}: inputs waiting ${waitedMs} ms without a commit (ORCHESTRATOR_PARTITION_STALL_MS ${bound})`,
      });
    this.stalled = now;
  }

  private onAssignment(assignment: Record<string, number[]>): void {
    const partitions = new Set<number>([
      ...(assignment[this.codec.physical(Topic.WF_REQUESTS)] ?? []),
      ...(assignment[this.codec.physical(Topic.TASK_RESULTS)] ?? []),
    ]);
    this.assigned.clear();
    partitions.forEach((p) => this.assigned.add(p));
    const inputs = [this.codec.physical(Topic.WF_REQUESTS), this.codec.physical(Topic.TASK_RESULTS)];
    for (const topic of inputs)
      for (const p of assignment[topic] ?? []) {
        // kafkajs keeps a partition's paused flag across rebalances (and drops it when it restarts a crashed
        // consumer): a quarantined partition is paused, every other one resumed.
        const op = this.quarantine.has(topic, p) ? 'pause' : 'resume';
        this.consumer?.[op]([{ topic, partitions: [p] }]);
      }
    for (const [p, o] of this.owned) {
      if (partitions.has(p)) continue;
      inputs.forEach((topic) => this.quarantine.drop(topic, p));
      o.revoked = true;
      this.owned.delete(p);
      void o.lock.then(() => o.producer.disconnect()).catch(() => undefined);
      this.logger.info({ partition: p }, 'partition revoked');
    }
    for (const p of partitions) if (!this.owned.has(p)) this.takeOver(p);
    this.logger.info({ partitions: this.ownedPartitions() }, 'engine assignment');
  }

  /** Fences the previous owner, writes a barrier, restores the partition's runs once the barrier is read. */
  private takeOver(partition: number, failures: OwnedPartition['failures'] = null): void {
    const producer = this.kafka.producer({
      transactionalId: `${this.cfg.ORCHESTRATOR_GROUP_ID}-p${partition}`,
      createPartitioner: JavaCompatiblePartitioner, // murmur2, as Java: run-keyed topics stay co-partitioned
      idempotent: true,
      maxInFlightRequests: 1,
      transactionTimeout: 30_000,
      retry: TRANSACTIONAL_RETRY, // a CONCURRENT_TRANSACTIONS refusal between back-to-back transactions
    });
    const o: OwnedPartition = {
      partition,
      producer,
      runs: new Map(),
      timers: new TimerQueue(),
      ready: Promise.resolve(),
      failures,
      lock: Promise.resolve(),
      revoked: false,
      waitingSince: new Map(),
      traces: new Map(),
    };
    o.ready = (async () => {
      const t0 = Date.now();
      await producer.connect(); // InitProducerId: fences a zombie with the same transactional id
      const nonce = `${this.cfg.ORCHESTRATOR_INSTANCE_ID}/${randomUUID()}`;
      const tx = await producer.transaction();
      const barrierKey = `${BARRIER_PREFIX}${partition}`;
      const value = this.codec.encode(Topic.WF_STATE, 'RunSnapshot', {
        metadata: newMetadata('RunSnapshot', { key: barrierKey, correlationId: barrierKey }),
        runId: barrierKey,
        sequence: 0,
        status: 'barrier',
        state: nonce,
        stateRef: null,
        segment: null,
      });
      await tx.send({
        topic: this.codec.physical(Topic.WF_STATE),
        messages: [{ partition, key: barrierKey, value }],
      });
      await tx.commit();
      await this.readModel.waitForBarrier(partition, nonce, this.cfg.ORCHESTRATOR_CATCH_UP_STALL_MS);
      // Terminal runs too: a late result for them must be recognised as stale, not as an unknown run.
      for (const s of this.readModel.inPartition(partition)) {
        o.runs.set(s.runId, s);
        o.timers.track(s);
      }
      this.metrics.restores.inc();
      this.logger.info(
        { partition, runs: o.runs.size, ms: Date.now() - t0 },
        'partition restored from wf.state',
      );
    })();
    o.ready.catch((err) => {
      this.logger.error({ err, partition }, 'partition take-over failed; retrying');
      this.retakeOver(o, err);
    });
    this.owned.set(partition, o);
  }

  /**
   * Replaces a partition's producer and restores it again (after a failed take-over, or a transaction error that
   * may leave the kafkajs producer unusable). Its batches are redelivered meanwhile: nothing was resolved.
   */
  private retakeOver(o: OwnedPartition, err: unknown): void {
    if (this.owned.get(o.partition) !== o || this.stopping) return;
    this.owned.delete(o.partition);
    o.revoked = true; // batches waiting for this producer's lock go back unresolved, to the next producer
    void o.producer.disconnect().catch(() => undefined);
    const failures = { count: (o.failures?.count ?? 0) + 1, since: o.failures?.since ?? Date.now() };
    if (Date.now() - failures.since >= this.cfg.ORCHESTRATOR_TAKEOVER_GIVE_UP_MS) {
      this.health.fail(
        COMPONENTS.engineProducer,
        new Error(
          `partition ${o.partition}: take-overs or transactions failed ${failures.count} times over ${Date.now() - failures.since} ms; last: ${(err as Error)?.message ?? String(err)}`,
          { cause: err },
        ),
      );
      return;
    }
    setTimeout(
      () => {
        if (!this.stopping && !this.owned.has(o.partition) && this.assigned.has(o.partition))
          this.takeOver(o.partition, failures);
      },
      backoffDelayMs(TAKEOVER_RETRY, Math.min(failures.count, 20)),
    ).unref();
  }

  private async onBatch(p: EachBatchPayload): Promise<void> {
    const { batch } = p;
    const o = this.owned.get(batch.partition);
    if (!o || batch.messages.length === 0 || this.stopping) return;
    if (!o.waitingSince.has(batch.topic)) o.waitingSince.set(batch.topic, Date.now());
    // Restoring may take a while (the read model catching up): keep the group membership alive meanwhile.
    const beat = setInterval(() => p.heartbeat().catch(() => undefined), 1_000);
    try {
      await o.ready;
    } catch {
      // The take-over failed (fenced by the partition's next owner, a broker away): its handler replaces the
      // producer or gives the partition up. Nothing was resolved, so the batch is fetched again; thrown on, a
      // non-retriable kafkajs error (a fenced epoch) would crash the consumer for good.
      return;
    } finally {
      clearInterval(beat);
    }
    await this.exclusively(o, async () => {
      try {
        if (o.revoked || p.isStale()) return;
        await this.processBatch(o, p);
        o.waitingSince.delete(batch.topic);
      } catch (err) {
        // The registry does not answer (5xx, network) or refuses (4xx): nothing of the batch was applied, and the
        // records are not at fault. The partition waits, named in /health, and is fetched again with backoff.
        if (err instanceof ContractError && err.retryable) {
          this.quarantine.hold(batch.topic, batch.partition, err);
          return;
        }
        throw err;
      }
    });
  }

  /**
   * Runs `f` with partition `o`'s lock: one transaction at a time per partition (the two input topics of partition
   * p and the retention sweep share its producer), in the order the callers asked.
   */
  private async exclusively(o: OwnedPartition, f: () => Promise<void>): Promise<void> {
    const previous = o.lock;
    let release!: () => void;
    o.lock = new Promise((r) => (release = r));
    await previous;
    try {
      await f();
    } finally {
      release();
    }
  }

  private async processBatch(o: OwnedPartition, p: EachBatchPayload): Promise<void> {
    try {
      await this.tracedBatch(o, p, 'per-batch');
    } catch (err) {
      if (!(err instanceof SnapshotPerInput)) throw err;
      // A run's state outgrew what a snapshot can carry somewhere in this batch: apply it again with a snapshot per
      // input, so the one input that made it too large is found and dead-lettered (the run stays as before it).
      this.logger.warn(
        { runId: err.runId, err: err.cause },
        'a snapshot could not be encoded; batch applied again input by input',
      );
      await this.tracedBatch(o, p, 'per-input');
    }
  }

  /**
   * {@link applyBatch} in a `keyflow.engine.batch` span (CONSUMER), which links to the trace of every input it applies
   * and is the parent of the batch's `keyflow.engine.transaction` span; each applied input gets a
   * `keyflow.engine.apply <event>` span in its run's trace (child of the context its record carries), whose context
   * the input's commands and lifecycle events carry on. All of them end when the transaction has committed or failed.
   */
  private async tracedBatch(
    o: OwnedPartition,
    p: EachBatchPayload,
    snapshots: 'per-batch' | 'per-input',
  ): Promise<void> {
    const batch = tracer().startSpan('keyflow.engine.batch', {
      kind: SpanKind.CONSUMER,
      attributes: {
        'messaging.system': 'kafka',
        'messaging.destination.name': p.batch.topic,
        'messaging.destination.partition.id': String(p.batch.partition),
        'messaging.batch.message_count': p.batch.messages.length,
      },
    });
    const spans: BatchSpans = { batch, links: new SpanLinks(batch, this.linkLimit), applied: [] };
    try {
      await this.applyBatch(o, p, snapshots, spans);
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      for (const s of [...spans.applied, spans.batch]) {
        s.recordException(err);
        s.setStatus({ code: SpanStatusCode.ERROR, message: err.message });
      }
      throw e;
    } finally {
      for (const s of spans.applied) s.end();
      spans.links.close();
      spans.batch.end();
    }
  }

  /**
   * The definition a run's parked inputs wait for, if this instance has it: the run's workflow version, or for a
   * parked StartRun's run the version its StartRun asks for (0: the latest).
   */
  private parkedDefinition(s: RunState): WorkflowDefinition | undefined {
    return this.registry.get(s.workflow, isParkedStart(s) ? s.version || null : s.version);
  }

  /** A parked input's record as the batch loop reads it (on its own topic: wf.requests or task.results). */
  private parkedRecord(p: ParkedInput, runId: string): { m: InputRecord; topic: string } {
    return {
      topic: this.codec.physical(p.record.topic),
      m: {
        key: Buffer.from(runId),
        value: Buffer.from(p.record.value, 'base64'),
        offset: p.record.offset,
        headers: p.record.headers,
      },
    };
  }

  /**
   * The owned runs with parked inputs, by the definition they wait for (`<workflow>@<version>`, `latest` for a
   * StartRun without a version): runs and inputs. O(owned runs): called by a scrape and once a second by the tick.
   */
  parkedRuns(): Map<string, { workflow: string; version: string; runs: number; inputs: number }> {
    const out = new Map<string, { workflow: string; version: string; runs: number; inputs: number }>();
    for (const o of this.owned.values())
      for (const s of o.runs.values()) {
        if (!s.parked?.length) continue;
        const name = definitionName(s);
        const entry = out.get(name) ?? {
          workflow: s.workflow,
          version: name.slice(s.workflow.length + 1),
          runs: 0,
          inputs: 0,
        };
        entry.runs++;
        entry.inputs += s.parked.length;
        out.set(name, entry);
      }
    return out;
  }

  /**
   * Names the owned runs with parked inputs in /health (degraded, code INPUTS_PARKED: how many runs, and the
   * workflow versions they wait for), or clears the condition when there are none.
   */
  private reportParked(): void {
    const parked = [...this.parkedRuns()];
    if (parked.length === 0) {
      this.health.recover(INPUTS_PARKED);
      return;
    }
    const runs = parked.reduce((n, [, p]) => n + p.runs, 0);
    const inputs = parked.reduce((n, [, p]) => n + p.inputs, 0);
    this.health.degrade(INPUTS_PARKED, {
      code: INPUTS_PARKED,
      error: `${runs} runs hold ${inputs} parked inputs for workflow versions this instance does not have: ${parked
        .map(([name, p]) => `${name} (${p.runs} runs, ${p.inputs} inputs)`)
        .join(', ')}; an instance that has them applies them when it owns the runs`,
    });
  }

  /**
   * Applies a batch and commits it in one transaction. Snapshots: `per-batch` encodes each changed run's snapshot
   * once, after the batch's last input of it (a run's snapshot costs its size once per batch, not once per input);
   * `per-input` encodes one after every input, so that an input whose state cannot be encoded is dead-lettered alone.
   * @throws SnapshotPerInput (per-batch only) when a run's snapshot cannot be encoded, for good.
   */
  private async applyBatch(
    o: OwnedPartition,
    p: EachBatchPayload,
    snapshots: 'per-batch' | 'per-input',
    spans: BatchSpans,
  ): Promise<void> {
    const { batch } = p;
    // A stand-in for a batch no codec could decode: apply what comes before it, then keep the partition paused.
    const bad = undecodableAt(batch.messages);
    const messages = bad ? batch.messages.slice(0, bad.index) : batch.messages;
    if (messages.length === 0) {
      if (bad) this.quarantine.add(batch.topic, batch.partition, bad.batch);
      return;
    }
    // Without a stand-in, past the whole batch (trailing transaction markers included); with one, up to it.
    const lastOffset = bad ? messages[messages.length - 1].offset : batch.lastOffset();
    const resultsTopic = this.codec.physical(Topic.TASK_RESULTS);
    const pending = new PendingRuns((id) => o.runs.get(id), {
      signalBufferLimit: this.cfg.ORCHESTRATOR_SIGNAL_BUFFER_LIMIT,
    });
    /** The input a run's snapshot is caused by: the batch's last applied input of the run. */
    const causes = new Map<string, { eventId: string; at: number }>();
    /** The trace context each run's outputs carry (its last applied input's span), kept for its timers. */
    const traces = new Map<string, TraceContext>();
    const records: OutputRecord[] = [];
    /** Inputs to dead-letter, each to the DLQ of `topic` (physical: the batch's, or a parked input's own). */
    const dlq: Array<{ m: InputRecord; err: Error; topic: string }> = [];
    let transitions = 0;
    const started: string[] = [];
    const finished: Array<{ workflow: string; status: string; ms: number }> = [];
    /** Schedule-to-result times of the results applied (observed after the commit). */
    const latencies: Array<{
      taskType: string;
      ms: number;
      outcome: 'completed' | 'failed';
      retry: boolean;
    }> = [];
    /**
     * The batch's records, in order; before a run's input, that run's parked inputs once this instance has their
     * definition (taken out of the run's state and applied here first, in the order they came).
     */
    const work: Array<{ m: InputRecord; topic: string }> = messages.map((m) => ({ m, topic: batch.topic }));
    /** Per input only: the snapshot of a run parked or unparked (applied inputs carry theirs: encodeOutputs). */
    const snapshotNow = async (runId: string) => {
      const state = pending.get(runId);
      if (state)
        records.push(
          ...(await encodeSnapshotRecords(
            this.codec,
            state,
            o.runs.get(runId),
            causes.get(runId)!,
            this.claim,
            o.partition,
          )),
        );
    };
    for (let i = 0; i < work.length; i++) {
      const { m, topic } = work[i];
      const logical = topic === resultsTopic ? Topic.TASK_RESULTS : Topic.WF_REQUESTS;
      let decoded;
      try {
        decoded = await this.codec.decode(logical, m.value, {
          topic,
          partition: batch.partition,
          offset: m.offset,
        });
      } catch (err) {
        if (err instanceof ContractError && !err.retryable) {
          dlq.push({ m, err, topic });
          continue;
        }
        throw err;
      }
      // A result whose output came by claim check: read it back. A blob that cannot be read for good (swept,
      // corrupt, no store here) fails the step with that named error instead of blocking the partition.
      let unreadable: (Error & { code?: string }) | undefined;
      try {
        decoded = await resolveInput(decoded, this.claim);
      } catch (err) {
        if ((err as { retryable?: boolean }).retryable !== false) throw err;
        unreadable = err as Error;
      }
      const decodedInput =
        unreadable && decoded.event === 'TaskCompleted'
          ? toWorkflowInput(
              {
                ...decoded,
                event: 'TaskFailed',
                value: {
                  ...decoded.value,
                  error: {
                    errorClass: unreadable.name,
                    message: unreadable.message,
                    retryable: false,
                    code: unreadable.code ?? null,
                    attempts: 1,
                    firstFailureAt: decoded.value.metadata.occurredAt,
                    lastFailureAt: decoded.value.metadata.occurredAt,
                  },
                },
              } as never,
              (name, v) => this.registry.get(name, v),
            )
          : toWorkflowInput(decoded, (name, v) => this.registry.get(name, v));
      const runId = (decoded.value as { runId: string }).runId; // every input of the engine names its run
      const now = Date.now();
      const state = pending.get(runId);
      // The run's parked inputs go first, in order, before this one (which is read again after them).
      if (state?.parked?.length && this.parkedDefinition(state)) {
        work.splice(i, 0, ...pending.unpark(runId).map((p) => this.parkedRecord(p, runId)));
        causes.set(runId, { eventId: decoded.value.metadata.eventId, at: now });
        // Per input, each change is snapshotted: this one too (a later input may be ignored, or the last one).
        if (snapshots === 'per-input') await snapshotNow(runId);
        i--;
        continue;
      }
      /** Keeps this input on its run, in order, for an instance that has the run's definition (parked.ts). */
      const park = async (
        kind: ParkedInput['kind'],
        detail: string,
        start?: { workflow: string; version: number | null; businessKey: string },
      ) => {
        const held = state?.parked?.length ?? 0;
        const wanted = start ?? state!;
        if (held >= this.cfg.ORCHESTRATOR_PARKED_INPUTS_LIMIT) {
          dlq.push({ m, err: new ParkedInputsFullError(runId, held, definitionName(wanted)), topic });
          return;
        }
        const eventId = decoded.value.metadata.eventId;
        pending.park(
          runId,
          {
            kind,
            eventId,
            parkedAt: now,
            detail,
            record: {
              topic: logical,
              partition: batch.partition,
              offset: m.offset,
              value: m.value!.toString('base64'),
              headers: textHeaders(m.headers),
            },
          },
          now,
          start,
        );
        causes.set(runId, { eventId, at: now });
        if (snapshots === 'per-input') await snapshotNow(runId);
        this.logger.warn(
          { runId, kind, workflow: definitionName(wanted), offset: m.offset, topic: logical },
          'input parked: its workflow version is not registered on this instance',
        );
      };
      if ('invalid' in decodedInput) {
        // A StartRun of a workflow or version this instance does not have: kept as a parked run.
        const unknown = decodedInput.unknownDefinition;
        if (unknown && (state === undefined || isParkedStart(state)))
          await park('start', definitionName(unknown), unknown);
        else dlq.push({ m, err: new InvalidRequestError(decodedInput.invalid), topic });
        continue;
      }
      // The engine's own clock, never the producer's occurredAt: a step's deadline starts when it is dispatched,
      // so a producer's clock skew or the engine's own lag cannot make a fresh command's timeout already due.
      const input = { ...decodedInput, at: now };
      // The unpark timer did its work above, or cannot yet (no definition here): nothing else to do.
      if (input.kind === 'timer-fired' && input.timerId === UNPARK_TIMER) continue;
      const def =
        state && !isParkedStart(state)
          ? this.registry.get(state.workflow, state.version)
          : input.kind === 'start' && !state
            ? this.registry.get(input.workflow, input.version)
            : undefined;
      if (!def && isParkedStart(state) && input.kind === 'cancel') {
        // A run that never started, of a workflow this instance does not have: cancelled as it is (parked.ts).
        pending.cancelParked(runId, input.reason, now);
        causes.set(runId, { eventId: input.eventId, at: now });
        if (snapshots === 'per-input') await snapshotNow(runId);
        this.logger.info(
          { runId, reason: input.reason },
          'a parked StartRun cancelled: the run never starts',
        );
        continue;
      }
      if (!def) {
        if (state) await park(input.kind, parkedDetail(input));
        else this.metrics.ignored.inc({ reason: 'UNKNOWN_RUN' } satisfies { reason: IgnoreReason });
        continue;
      }
      // A definition's mapping, condition or aggregate may throw (or an output may not encode): that input is
      // dead-lettered with the error, and the partition goes on (it must never block every run behind it).
      let d: Decision | undefined;
      let outputs: OutputRecord[] = [];
      const dispatchedAt =
        state && (input.kind === 'task-completed' || input.kind === 'task-failed')
          ? stepStateOf(state, input.stepId)?.dispatchedAt
          : undefined;
      try {
        d = pending.apply(def, input);
        if (!d.ignored) {
          const parent = contextFromRecord(m.headers, decoded.value.metadata);
          const applySpan = tracer().startSpan(
            `keyflow.engine.apply ${decoded.event}`,
            {
              attributes: { 'keyflow.run_id': input.runId, 'keyflow.input': input.kind },
              links: [{ context: spans.batch.spanContext() }],
            },
            parent,
          );
          spans.applied.push(applySpan);
          const carried = trace.getSpanContext(parent);
          if (carried) spans.links.add(carried);
          const traceCtx = traceContextOf(trace.setSpan(parent, applySpan));
          traces.set(input.runId, traceCtx);
          outputs = await encodeOutputs(
            this.codec,
            d.state!,
            d.commands,
            d.events,
            { eventId: input.eventId, at: input.at, ...traceCtx },
            this.claim,
            snapshots === 'per-input'
              ? { previous: o.runs.get(input.runId), partition: o.partition }
              : undefined,
          );
        }
      } catch (e) {
        // Applied, but its outputs could not be encoded: the run goes back to how it was before this input.
        if (d && !d.ignored) pending.undoLast(input.runId);
        // A blob store that does not answer aborts the batch (retried like a broker error); anything else about
        // this input (a definition's bug, a payload the claim check cannot carry) dead-letters only this input.
        if (e instanceof BlobError && e.retryable) throw e;
        if (!(e instanceof BlobError) && (e as { retryable?: boolean }).retryable === true) throw e;
        const err = e instanceof Error ? e : new Error(String(e));
        this.logger.error(
          { err, runId: input.runId, kind: input.kind },
          'applying an input failed; it goes to the DLQ',
        );
        const what = `${input.kind} for run ${input.runId}`;
        dlq.push({
          m,
          err: err instanceof PayloadTooLargeError ? err : new DefinitionError(what, err),
          topic,
        });
        continue;
      }
      if (d.ignoredReason) {
        this.metrics.ignored.inc({ reason: d.ignoredReason });
        if (d.ignoredReason === SIGNAL_BUFFER_FULL)
          this.logger.warn(
            { runId: input.runId, reason: d.ignored },
            'signal rejected: the run buffers too many',
          );
        continue;
      }
      const next = d.state!;
      causes.set(next.runId, { eventId: input.eventId, at: input.at });
      if (dispatchedAt !== undefined)
        latencies.push({
          taskType: (decoded.value as { taskType: string }).taskType,
          ms: input.at - dispatchedAt,
          outcome: input.kind === 'task-completed' ? 'completed' : 'failed',
          retry: (decoded.value as { attempt: number }).attempt > 1,
        });
      transitions++;
      if (input.kind === 'start') started.push(next.runId);
      if (TERMINAL.has(next.status))
        finished.push({
          workflow: next.workflow,
          status: next.status,
          ms: next.updatedAt - next.startedAt,
        });
      records.push(...outputs);
    }
    const changed = pending.changed();
    /** Parked StartRuns' runs whose start, applied at last, was dead-lettered: tombstoned on wf.state. */
    const removed = pending.removed();
    if (snapshots === 'per-batch')
      for (const [runId, state] of changed) {
        try {
          records.push(
            ...(await encodeSnapshotRecords(
              this.codec,
              state,
              o.runs.get(runId),
              causes.get(runId)!,
              this.claim,
              o.partition,
            )),
          );
        } catch (e) {
          if ((e as { retryable?: boolean }).retryable === true) throw e; // a store outage: the batch is retried
          throw new SnapshotPerInput(runId, e);
        }
      }

    let tx: Awaited<ReturnType<typeof o.producer.transaction>> | undefined;
    const txSpan = tracer().startSpan(
      'keyflow.engine.transaction',
      { attributes: { 'keyflow.records': records.length + dlq.length } },
      trace.setSpan(ROOT_CONTEXT, spans.batch),
    );
    try {
      // DLQ records go in order, after the rest, each in the codec measured to fit its DLQ (fitDlqRecord, against
      // twice KEYFLOW_MAX_MESSAGE_BYTES plus headroom, the limit DLQs are created with): gzip, or zstd for one that gzip
      // does not bring under (it came compressed by its producer, zstd from librdkafka or Java, which may shrink
      // repeats further apart than gzip's 32 KiB window), or a stand-in without its value when no codec does (a few
      // KB of zstd may hold more than any request carries).
      const dead: Array<{ record: ReturnType<typeof dlqMessage>; dlqTopic: string }> = [];
      for (const { m, err, topic } of dlq) {
        const now = Date.now();
        const record = dlqMessage(
          {
            topic,
            partition: batch.partition,
            offset: m.offset,
            key: m.key ?? null,
            value: m.value ?? null,
            headers: m.headers ?? {},
          },
          {
            errorClass: err.name,
            errorMessage: err.message,
            errorCode: err instanceof KeyflowError ? err.code : null,
            attempts: 1,
            firstFailureAt: now,
            lastFailureAt: now,
            consumerGroup: this.cfg.ORCHESTRATOR_GROUP_ID,
          },
          this.cfg.ORCHESTRATOR_INSTANCE_ID,
        );
        dead.push({ record, dlqTopic: dlqTopicFor(topic) });
      }
      // Fitted before the transaction opens: measuring a large record takes a while.
      const dlqTopic = dlqTopicFor(batch.topic);
      const fitted: Array<{ dlqTopic: string; compression: CompressionTypes; records: Msg[] }> = [];
      /** Parked inputs' records of the other input topic (a parked result dead-lettered in a requests batch). */
      const fittedElsewhere: typeof fitted = [];
      for (const d of dead) {
        const { record, compression } = await fitDlqRecord(
          d.record,
          d.dlqTopic,
          dlqLimitBytes(this.cfg.KEYFLOW_MAX_MESSAGE_BYTES),
        );
        const into = d.dlqTopic === dlqTopic ? fitted : fittedElsewhere;
        const run = into.at(-1);
        if (run?.compression === compression && run.dlqTopic === d.dlqTopic) run.records.push(record);
        else into.push({ dlqTopic: d.dlqTopic, compression, records: [record] });
      }
      tx = await o.producer.transaction();
      const byTopic = new Map<string, Msg[]>();
      // Within one transaction only the last snapshot of a run matters: earlier ones are superseded at once.
      const snapshotTopic = this.codec.physical(Topic.WF_STATE);
      const lastSnapshot = new Map<string, number>();
      records.forEach((r, i) => r.topic === snapshotTopic && lastSnapshot.set(r.key, i));
      const add = (topic: string, m: Msg) => {
        const messages = byTopic.get(topic);
        if (messages) messages.push(m);
        else byTopic.set(topic, [m]);
      };
      records.forEach((r, i) => {
        if (r.topic === snapshotTopic && lastSnapshot.get(r.key) !== i) return;
        add(r.topic, { key: r.key, value: r.value, partition: r.partition, headers: r.headers });
      });
      for (const key of removed) add(snapshotTopic, { key, value: null, partition: o.partition });
      // Requests of at most half of max.message.bytes (before gzip; KEYFLOW_MAX_MESSAGE_BYTES), so no record batch
      // exceeds what the broker accepts.
      for (const part of splitBySize([...byTopic], this.claim.thresholdBytes))
        await tx.sendBatch({ compression: writeCompression(CompressionTypes.GZIP), topicMessages: part });
      for (const { compression, records: run } of fitted)
        for (const part of splitBySize([[dlqTopic, run]], this.claim.thresholdBytes))
          await tx.sendBatch({ compression, topicMessages: part });
      for (const { dlqTopic: elsewhere, compression, records: run } of fittedElsewhere)
        for (const part of splitBySize([[elsewhere, run]], this.claim.thresholdBytes))
          await tx.sendBatch({ compression, topicMessages: part });
      const next = (BigInt(lastOffset) + 1n).toString();
      // First request of the transaction when every input was ignored (no send): kafkajs sends it once, and right
      // after the previous commit the coordinator may refuse it with CONCURRENT_TRANSACTIONS.
      await whileTransactionsConcurrent(() =>
        tx!.sendOffsets({
          consumerGroupId: this.cfg.ORCHESTRATOR_GROUP_ID,
          topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: next }] }],
        }),
      );
      await tx.commit();
      txSpan.end();
    } catch (err) {
      await tx?.abort().catch(() => undefined);
      txSpan.recordException(err as Error);
      txSpan.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
      txSpan.end();
      this.logger.warn(
        { err, topic: batch.topic, partition: batch.partition },
        'transaction aborted; the batch will be redelivered',
      );
      this.retakeOver(o, err); // a failed commit or abort can leave the kafkajs producer unusable
      // Nothing was resolved, so the batch is fetched again. kafkajs crashes its consumer for good (no restart) on an
      // error that is not retriable, such as a fenced producer's INVALID_PRODUCER_EPOCH when the partition's next
      // owner took over first: the error goes on as retriable (kafkajs retries the batch, then rejoins the group).
      throw err instanceof KafkaJSError && err.retriable
        ? err
        : new KafkaJSError(err as Error, { retriable: true });
    }
    // Only now does the in-memory state move on.
    o.failures = null;
    for (const id of removed) {
      o.runs.delete(id);
      o.traces.delete(id);
    }
    for (const [id, s] of changed) {
      o.timers.track(s, o.runs.get(id));
      o.runs.set(id, s);
      const t = traces.get(id);
      if (TERMINAL.has(s.status)) o.traces.delete(id);
      else if (t) o.traces.set(id, t);
    }
    p.resolveOffset(lastOffset);
    if (bad) this.quarantine.add(batch.topic, batch.partition, bad.batch);
    else this.quarantine.ok(batch.topic, batch.partition);
    this.metrics.transitions.inc(transitions);
    this.metrics.transactionInputs.observe(messages.length);
    this.metrics.started.inc(started.length);
    for (const f of finished) {
      this.metrics.finished.inc({ status: f.status });
      this.metrics.runSeconds.observe({ workflow: f.workflow, status: f.status }, f.ms / 1000);
    }
    if (dlq.length) this.metrics.dlq.inc(dlq.length);
    for (const l of latencies) {
      this.metrics.stepLatency.observe({ task_type: l.taskType }, l.ms / 1000);
      this.metrics.taskResults.inc({ task_type: l.taskType, outcome: l.outcome, retry: String(l.retry) });
    }
  }

  /**
   * The retention sweeps, until stop: {@link forgetEndedRuns}, then ORCHESTRATOR_RETENTION_SWEEP_MS of rest, so a
   * sweep starts only once the previous one ended, however long it took. A failed sweep is logged; the next tries again.
   */
  private async sweepRetention(): Promise<void> {
    while (!this.stopping) {
      await new Promise<void>((r) => {
        const t = setTimeout(r, this.cfg.ORCHESTRATOR_RETENTION_SWEEP_MS);
        t.unref();
        this.wakeRetention = () => (clearTimeout(t), r());
      });
      this.wakeRetention = undefined;
      if (this.stopping) return;
      await this.forgetEndedRuns().catch((err) => this.logger.warn({ err }, 'retention sweep failed'));
    }
  }

  /**
   * Forgets the owned runs that ended more than ORCHESTRATOR_RUN_RETENTION_MS ago: per partition, one transaction of
   * the partition's own producer (fenced like its batches, and serialised with them by the partition's lock) writes
   * a tombstone (null value) for each to wf.state, on the partition its snapshots are on; after the commit the
   * engine drops them, and every read model drops them when it reads the tombstone (compaction then removes the
   * key: Kafka docs "Log Compaction", a null value deletes). A failed transaction is handled like a failed batch
   * (abort, take the partition over again); the runs stay until the next sweep. At most FORGET_RUNS_PER_SWEEP runs
   * and FORGET_RECORDS_PER_SWEEP tombstones per partition per sweep (the rest wait for the next one).
   * Only the transaction holds the partition's lock: the forgotten runs' snapshot blobs are given their expiry (the
   * claim check's grace time) after it, outside the lock, once per run, yielding to the event loop between runs; the
   * sweep yields between partitions too, and stops between two runs when the engine stops.
   */
  private async forgetEndedRuns(): Promise<void> {
    if (this.stopping) return;
    const cutoff = Date.now() - this.cfg.ORCHESTRATOR_RUN_RETENTION_MS;
    const expired = (s: RunState | undefined) =>
      s !== undefined && TERMINAL.has(s.status) && (s.endedAt ?? s.updatedAt) <= cutoff;
    for (const o of [...this.owned.values()]) {
      if (this.stopping) return;
      await yieldToLoop();
      const found: string[] = [];
      let records = 0;
      let seen = 0;
      for (const s of o.runs.values()) {
        if (++seen % FORGET_SCAN_YIELD === 0) await yieldToLoop(); // a partition may hold a million runs
        if (!expired(s)) continue;
        found.push(s.runId);
        // A run's tombstones: its core and one per map item segment (a 100,000-item map has 391).
        records += 1 + Object.values(s.steps).reduce((n, st) => n + (st.map?.segments.length ?? 0), 0);
        if (found.length >= FORGET_RUNS_PER_SWEEP || records >= FORGET_RECORDS_PER_SWEEP) break;
      }
      if (found.length === 0) continue;
      // A partition still being taken over (or whose take-over failed: its handler deals with that) waits.
      if (
        !(await o.ready.then(
          () => true,
          () => false,
        ))
      )
        continue;
      // Checked again under the lock: a batch applied meanwhile (a retry) may have reopened one.
      let forgotten: string[] = [];
      await this.exclusively(o, async () => {
        forgotten = await this.forget(
          o,
          found.filter((id) => expired(o.runs.get(id))),
        );
      });
      await this.expireForgottenBlobs(forgotten);
    }
  }

  /**
   * One transaction of `o`'s producer: a wf.state tombstone for each of `runIds`; then they are dropped here.
   * @returns the runs forgotten (none when the transaction failed: the partition is taken over again)
   */
  private async forget(o: OwnedPartition, runIds: string[]): Promise<string[]> {
    if (o.revoked || this.stopping || runIds.length === 0) return [];
    let tx: Awaited<ReturnType<typeof o.producer.transaction>> | undefined;
    try {
      tx = await o.producer.transaction();
      // The run's map item segments first (their keys are `<run>/<map>/<k>`: see snapshotParts), then the run.
      const keys = runIds.flatMap((runId) => {
        const segments = new Set(this.readModel.segmentKeys(runId));
        for (const [mapId, st] of Object.entries(o.runs.get(runId)?.steps ?? {}))
          st.map?.segments.forEach((_, k) => segments.add(segmentKey(runId, mapId, k)));
        return [...segments, runId];
      });
      // In requests of at most FORGET_RECORDS_PER_REQUEST tombstones, gzipped, so none exceeds the broker's
      // message.max.bytes (keys of segments are long: 1,000 runs of 10,000-item maps are 40,000 tombstones).
      for (let i = 0; i < keys.length; i += FORGET_RECORDS_PER_REQUEST)
        await tx.send({
          topic: this.codec.physical(Topic.WF_STATE),
          acks: -1,
          compression: writeCompression(CompressionTypes.GZIP),
          messages: keys
            .slice(i, i + FORGET_RECORDS_PER_REQUEST)
            .map((key) => ({ partition: o.partition, key, value: null })),
        });
      await tx.commit();
      tx = undefined;
    } catch (err) {
      await tx?.abort().catch(() => undefined);
      this.logger.warn(
        { err, partition: o.partition },
        'could not forget ended runs; retrying at the next sweep',
      );
      this.retakeOver(o, err);
      return [];
    }
    runIds.forEach((id) => (o.runs.delete(id), o.traces.delete(id)));
    this.metrics.forgotten.inc(runIds.length);
    this.logger.info(
      { partition: o.partition, runs: runIds.length },
      'ended runs past their retention forgotten',
    );
    return runIds;
  }

  /**
   * Gives the blobs the forgotten `runIds` may still hold without an expiry (their latest snapshot's and segments')
   * the claim check's grace time: after their tombstones' commit, outside any partition's lock, once per run, each
   * costing that run's blobs (the stores list the run's prefix, not the store). Yields between runs; at stop, the
   * runs left keep their blobs (bounded leak, logged). A store error is logged and the run's blobs stay.
   */
  private async expireForgottenBlobs(runIds: string[]): Promise<void> {
    const store = this.claim.store;
    if (!store || runIds.length === 0) return;
    const expiresAt = supersededExpiry(Date.now(), this.claim.o.graceMs);
    for (const [i, id] of runIds.entries()) {
      if (this.stopping) {
        this.logger.warn(
          { runs: runIds.length - i },
          "stopping: forgotten runs' blobs left without an expiry",
        );
        return;
      }
      await yieldToLoop();
      for (const prefix of forgottenRunBlobPrefixes(id, this.readModel.sharesLegacyBlobPrefix(id)))
        await store
          .expire(prefix, expiresAt)
          .catch((err) => this.logger.warn({ err, runId: id }, "could not expire a forgotten run's blobs"));
    }
  }

  /**
   * Publishes TimerFired for the due timers of owned runs: each partition's TimerQueue gives the due ones (no scan of
   * every run), each once until its TimerFired is applied; those that could not be published are given back.
   */
  private async fireTimers(): Promise<void> {
    if (this.stopping || !this.timerProducer) return;
    const now = Date.now();
    // Once a second: the owned runs change with batches, take-overs, revocations and sweeps alike.
    if (now - this.parkedReportedAt >= 1_000) {
      this.parkedReportedAt = now;
      this.reportParked();
    }
    const messages: Array<{ key: string; value: Buffer; headers?: Record<string, string> }> = [];
    const taken: Array<[OwnedPartition, DueTimer[]]> = [];
    for (const o of this.owned.values()) {
      o.timers.compactIfStale(o.runs.values());
      const due = o.timers.takeDue(now, (runId) => o.runs.get(runId));
      if (!due.length) continue;
      taken.push([o, due]);
      for (const { runId, timerId, timer } of due) {
        // In the run's trace: a retry after backoff or a timeout continues from the run's last step.
        const t = o.traces.get(runId);
        messages.push({
          key: runId,
          headers: traceHeaders(t),
          value: this.codec.encode(Topic.WF_REQUESTS, 'TimerFired', {
            metadata: newMetadata('TimerFired', {
              key: runId,
              correlationId: runId,
              eventId: derivedEventId(runId, `timer/${timerId}/${timer.dueAt}`),
              ...t,
            }),
            runId,
            timerId,
            purpose: timer.purpose,
            dueAt: timer.dueAt,
          }),
        });
      }
    }
    if (!messages.length) return;
    // Messages are in the order of `taken`'s timers, one each: the first `sent` of them are published.
    let sent = 0;
    try {
      // In requests of at most half of max.message.bytes, as the engine's transactions: a tick can fire many timers
      // at once (runs started together with one run timeout), and the broker refuses a record batch over the limit.
      for (const part of splitBySize(
        [[this.codec.physical(Topic.WF_REQUESTS), messages]],
        this.claim.thresholdBytes,
      )) {
        await this.timerProducer.send({ ...part[0], acks: -1 });
        sent += part[0].messages.length;
      }
    } catch (err) {
      // Only the timers not published are given back (retried at the next tick): the others' TimerFired is written.
      let i = 0;
      for (const [o, due] of taken) {
        const unsent = due.filter(() => i++ >= sent);
        if (unsent.length) o.timers.giveBack(unsent);
      }
      this.logger.warn(
        { err, published: sent, left: messages.length - sent },
        'could not publish due timers; retrying at the next tick',
      );
    } finally {
      this.metrics.timersFired.inc(sent);
    }
  }
}

/** A run's snapshot could not be encoded in a per-batch pass: the batch is applied again with one per input. */
class SnapshotPerInput extends KeyflowError {
  readonly code = 'SNAPSHOT_PER_INPUT';
  /** The engine applies the batch again, one input at a time. */
  readonly retryable = true;
  constructor(
    readonly runId: string,
    cause: unknown,
  ) {
    super(`the snapshot of run ${runId} could not be encoded`, { cause });
  }
}

/**
 * A wf.requests record the engine cannot apply (a StartRun of an unknown workflow, with an input that is not JSON
 * or does not match the workflow's input schema): dead-lettered with this class and the reason. Not retryable.
 */
export class InvalidRequestError extends KeyflowError {
  readonly code = 'INVALID_REQUEST';
  readonly retryable = false;
}

/** The /health condition id and code of owned runs holding parked inputs (Engine.reportParked). */
export const INPUTS_PARKED = 'INPUTS_PARKED';

/**
 * An input for a run that holds ORCHESTRATOR_PARKED_INPUTS_LIMIT parked inputs already (its workflow version is not
 * registered on this instance): dead-lettered to its topic's DLQ with this class. Not retryable here: redrive it once
 * an instance with the workflow version owns the run.
 */
export class ParkedInputsFullError extends KeyflowError {
  readonly code = 'PARKED_INPUTS_FULL';
  readonly retryable = false;
  constructor(runId: string, held: number, definition: string) {
    super(
      `run ${runId} holds ${held} parked inputs (ORCHESTRATOR_PARKED_INPUTS_LIMIT) waiting for ${definition}, not registered here`,
    );
  }
}

/** A record of the engine's input topics as the batch loop reads it: fetched, or a parked input's (parked.ts). */
type InputRecord = {
  key: Buffer | null;
  value: Buffer | null;
  offset: string;
  headers?: IHeaders;
};

/** `<workflow>@<version>` of a run, `latest` for a parked StartRun's run without a version (0). */
const definitionName = (s: { workflow: string; version: number | null }) =>
  `${s.workflow}@${s.version || 'latest'}`;

/** A record's headers as text (what a parked input keeps: the trace context). */
function textHeaders(headers: IHeaders | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers ?? {})) {
    const one = Array.isArray(v) ? v[0] : v;
    if (one !== undefined) out[k] = one.toString();
  }
  return out;
}

/** A word on a parked input for people (ParkedInput.detail). */
function parkedDetail(input: WorkflowInput): string {
  switch (input.kind) {
    case 'signal':
      return input.signal;
    case 'cancel':
      return input.terminate ? `terminate: ${input.reason}` : input.reason;
    case 'task-completed':
    case 'task-failed':
      return `${input.stepId} attempt ${input.attempt}`;
    case 'timer-fired':
      return input.timerId;
    case 'retry':
      return input.fromStepId ?? 'from the failed step';
    case 'start':
      return definitionName(input);
  }
}

/**
 * Applying an input failed for good because a definition's function threw (a mapping, condition, item list or
 * aggregate, or one that changed what it was given): the input is dead-lettered with this class and the cause's
 * message. Not retryable: fix the definition, then redrive.
 */
export class DefinitionError extends KeyflowError {
  readonly code = 'DEFINITION_FAILED';
  readonly retryable = false;
  constructor(what: string, cause: Error) {
    super(`${what}: ${cause.message}`, { cause });
  }
}

type Msg = { key: string | Buffer | null; value: Buffer | null; headers?: IHeaders; partition?: number };

/**
 * Splits messages into groups of at most `maxBytes` as {@link messageBytes} counts them (key, value, headers and the
 * record's overhead); a larger single message goes alone. The engine gives half of max.message.bytes (the claim
 * check's threshold), so no partition's record batch in one request can exceed it.
 */
export function splitBySize(
  byTopic: Array<[string, Msg[]]>,
  maxBytes: number,
): Array<Array<{ topic: string; messages: Msg[] }>> {
  const parts: Array<Array<{ topic: string; messages: Msg[] }>> = [];
  let current: Array<{ topic: string; messages: Msg[] }> = [];
  let size = 0;
  for (const [topic, messages] of byTopic) {
    for (const m of messages) {
      const bytes = messageBytes(m);
      if (size > 0 && size + bytes > maxBytes) {
        parts.push(current);
        current = [];
        size = 0;
      }
      const last = current.at(-1);
      if (last?.topic === topic) last.messages.push(m);
      else current.push({ topic, messages: [m] });
      size += bytes;
    }
  }
  if (current.length) parts.push(current);
  return parts;
}
