import { type Consumer, type EachBatchPayload, type Kafka, type Producer } from '@keyflow/kafka';
import { claimCheckFromConfig, WF_EVENTS_RETENTION_MS, type ClaimCheck } from '@keyflow/blobs';
import {
  ContractError,
  derivedEventId,
  newMetadata,
  PayloadSerde,
  type EventCodec,
} from '@keyflow/contracts';
import {
  assertCoPartitioned,
  assertGroupIdMigrated,
  coPartitionedAssigner,
  createIdempotentProducer,
  ensureTopics,
  subscribeWhenReady,
  UndecodableBatchError,
  PartitionQuarantine,
  undecodableAt,
  watchProducer,
  type TopicSpec,
  connectUntilAnswered,
} from '@keyflow/kafka';
import { dlqTopicFor, alignDlqLimits, dlqTopicConfigs } from '@keyflow/ops';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import {
  ComponentHealth,
  SpanLinks,
  spanLinkLimit,
  traceHeaders,
  tracer,
  type Logger,
} from '@keyflow/observability';
import { backoffDelayMs } from '@keyflow/workflow';
import type { OrchestratorConfig } from '../config';
import type { WorkflowRegistry } from '../workflows/registry';
import type { RunReadModel } from './read-model';
import { dlqOf, taskTopic, Topic, type DlqTopic, type LogicalTopic } from '@keyflow/schemas';
import type { OrchestratorMetrics } from './metrics';
import { COMPONENTS } from './components';
import type { DueTimer } from './timers';
import { stallConditionId, stalledPartitions } from './stalls';
import {
  exclusively,
  oneMoreFailure,
  ownedPartition,
  restorePartition,
  TAKEOVER_RETRY,
  type OwnedPartition,
  type RestoreDeps,
} from './ownership';
import { BatchApply, definitionName, SnapshotPerInput, type ApplyDeps, type BatchSpans } from './apply';
import { abandonBatch, commitBatch, openBatch, splitBySize, stillFresh, type CommitDeps } from './commit';
import { RetentionSweeper } from './retention';
import type { LocalCommand } from './mapping';

/** The engine's input topics (logical): what it consumes, and what it dead-letters into `<topic>.dlq`. */
const ENGINE_INPUTS = [Topic.WF_REQUESTS, Topic.TASK_RESULTS] as const;

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
  /** What the phases need of the engine (ownership.ts, apply.ts, commit.ts, retention.ts). */
  private readonly restoreDeps: RestoreDeps;
  private readonly applyDeps: ApplyDeps;
  private readonly commitDeps: CommitDeps;
  private readonly retention: RetentionSweeper;
  /** Runs the local steps' commands after their commit (set by the runtime when a definition has local steps). */
  private localSteps?: { run(commands: LocalCommand[]): void };

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
      for (const o of owned.values()) yield* o.counts.values();
    });
    metrics.setParkedSource(() => this.parkedRuns().values());
    this.restoreDeps = { cfg, codec, readModel, metrics, logger };
    this.applyDeps = { cfg, codec, serde: new PayloadSerde(codec, claim), claim, registry, logger, metrics };
    this.commitDeps = { cfg, codec, claim, logger, retakeOver: (o, err) => this.retakeOver(o, err) };
    this.retention = new RetentionSweeper({
      ...this.commitDeps,
      readModel,
      metrics,
      owned: () => this.owned.values(),
      stopping: () => this.stopping,
    });
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
    const localTypes = new Set<string>();
    for (const name of registry.names()) {
      const def = registry.get(name)!;
      for (const s of def.stepIndex.values()) {
        if (s.kind === 'task' && s.local)
          localTypes.add(s.type); // a local step's commands stay in process
        else if ((s.kind === 'task' || s.kind === 'map') && !s.child) taskTypes.add(s.type); // a child step sends no commands
        if (s.kind === 'task' && s.compensate && !s.child) taskTypes.add(s.compensate.type);
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
      // A local step's command a handler cannot take (its input refused) is dead-lettered like a worker's.
      ...[...localTypes]
        .filter((t) => !taskTypes.has(t))
        .map((t) => ({ topic: dlqOf(taskTopic(t)), partitions: 1, configs: dlqConfigs })),
    ];
  }

  /** The runner of local steps' commands: each batch's, after its transaction commits (see local-steps.ts). */
  useLocalSteps(runner: { run(commands: LocalCommand[]): void }): void {
    this.localSteps = runner;
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
    await this.prepareTopics();
    await this.readModel.start(); // before consuming: take-overs wait for it to read their barriers
    this.timerProducer = watchProducer(createIdempotentProducer(this.kafka), (err) =>
      this.health.fail(COMPONENTS.engineProducer, err),
    );
    await connectUntilAnswered(this.timerProducer, { what: 'engine timer producer', logger: this.logger });
    await this.startConsuming();
    this.tick = setInterval(() => void this.fireTimers(), this.cfg.ORCHESTRATOR_TIMER_TICK_MS);
    this.tick.unref();
    if (this.cfg.ORCHESTRATOR_RUN_RETENTION_MS > 0) this.retentionLoop = this.sweepRetention();
    const stall = this.cfg.ORCHESTRATOR_PARTITION_STALL_MS;
    this.stallCheck = setInterval(() => this.checkStalls(), Math.min(1_000, Math.max(100, stall / 4)));
    this.stallCheck.unref();
  }

  /**
   * Creates the engine's topics, aligns its DLQs' size limits, checks co-partitioning and the group id, and registers
   * the schemas of its topics.
   * @throws PartitionCountMismatchError when the run-keyed topics have different partition counts.
   */
  private async prepareTopics(): Promise<void> {
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
  }

  /** The engine's consumer of wf.requests and task.results (co-partitioned assignment), running; its crash is fatal. */
  private async startConsuming(): Promise<void> {
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
    const o = ownedPartition(this.kafka, this.cfg, partition, failures);
    o.ready = restorePartition(o, this.restoreDeps);
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
    const failures = oneMoreFailure(o);
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
    await exclusively(o, async () => {
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
   * The owned runs with parked inputs, by the definition they wait for (`<workflow>@<version>`, `latest` for a
   * StartRun without a version): runs and inputs. O(parked runs) (OwnedPartition.parked): called by a scrape and once
   * a second by the tick.
   */
  parkedRuns(): Map<string, ParkedSummary> {
    return parkedSummary(this.owned.values());
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
   * Applies a batch and commits it in one transaction (the phases: apply.ts, then commit.ts; see
   * docs/architecture/engine.md). Snapshots: `per-batch` encodes each changed run's snapshot once, after the batch's
   * last input of it; `per-input` encodes one after every input, so that an input whose state cannot be encoded is
   * dead-lettered alone. The partition's state moves on only after the commit.
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
    // The transaction opens first, its offsets sent at once: they overlap the apply (commit.ts, openBatch).
    const open = await openBatch(o, this.commitDeps, batch, lastOffset, spans.batch);
    let applied: BatchApply;
    try {
      applied = new BatchApply(this.applyDeps, o, batch.partition, snapshots, spans);
      await applied.run(messages, batch.topic);
      await applied.snapshotChanged();
    } catch (err) {
      await abandonBatch(o, this.commitDeps, open, err); // throws instead when the abort failed
      throw err;
    }
    const tx = await stillFresh(o, this.commitDeps, open, batch, lastOffset, spans.batch);
    await commitBatch(o, this.commitDeps, tx, batch, applied);
    // Only now does the in-memory state move on.
    applied.settle();
    // The read model takes these states as they are when it reads their snapshot records, instead of parsing them.
    this.readModel.committedHere(applied.committedStates());
    // Local steps run only once their dispatch is durable, outside the partition's lock (local-steps.ts).
    if (applied.local.length) this.localSteps?.run(applied.local);
    p.resolveOffset(lastOffset);
    if (bad) this.quarantine.add(batch.topic, batch.partition, bad.batch);
    else this.quarantine.ok(batch.topic, batch.partition);
    applied.observe(this.metrics, messages.length);
  }

  /**
   * The retention sweeps, until stop: {@link RetentionSweeper.forgetEndedRuns}, then ORCHESTRATOR_RETENTION_SWEEP_MS of rest, so a
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
      await this.retention
        .forgetEndedRuns()
        .catch((err) => this.logger.warn({ err }, 'retention sweep failed'));
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
      // A partition being restored has part of its runs: its timers wait for the rest (a rebuild would put back
      // timers taken already, and their TimerFired could not be applied before the restore ends anyway).
      if (!o.restored) continue;
      o.timers.compactIfStale(o.timed, (runId) => o.runs.get(runId));
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
      const topic = this.codec.physical(Topic.WF_REQUESTS);
      for (const { topicMessages } of splitBySize([[topic, messages]], this.claim.thresholdBytes)) {
        await this.timerProducer.send({ ...topicMessages[0], acks: -1 });
        sent += topicMessages[0].messages.length;
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

/** Owned runs with parked inputs for one definition (`workflow@version`): see {@link parkedSummary}. */
export interface ParkedSummary {
  workflow: string;
  /** The version they wait for, or `latest` (a parked StartRun without a version). */
  version: string;
  runs: number;
  inputs: number;
}

/**
 * The runs of `partitions` that hold parked inputs, by the definition they wait for (`<workflow>@<version>`).
 * Looks at each partition's parked runs only (`OwnedPartition.parked`), never at every run it owns.
 */
export function parkedSummary(
  partitions: Iterable<Pick<OwnedPartition, 'runs' | 'parked'>>,
): Map<string, ParkedSummary> {
  const out = new Map<string, ParkedSummary>();
  for (const o of partitions)
    for (const id of o.parked) {
      const s = o.runs.get(id);
      if (!s?.parked?.length) continue;
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

/** The /health condition id and code of owned runs holding parked inputs (Engine.reportParked). */
export const INPUTS_PARKED = 'INPUTS_PARKED';

export { splitBySize } from './commit';
export { DefinitionError, InvalidRequestError, ParkedInputsFullError } from './apply';
