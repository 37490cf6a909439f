import type Redis from 'ioredis';
import type { ClaimCheck } from '@keyflow/blobs';
import type { EventCodec } from '@keyflow/contracts';
import { KeyflowError, retryableOf } from '@keyflow/errors';
import { checkedByContract, type ContractHandlerMethod, type TaskHandlerFn } from '@keyflow/handler';
import { createRedis, IdempotencyStore, idempotencyKeyPrefix } from '@keyflow/idempotency';
import {
  abortableSleep,
  BatchingProducer,
  ConsumerStoppingError,
  connectUntilAnswered,
  createIdempotentProducer,
  watchProducer,
  type ConsumedMessage,
  type HandleContext,
  type Kafka,
  type Producer,
} from '@keyflow/kafka';
import type { ComponentHealth, Logger, Registry } from '@keyflow/observability';
import { taskTopic } from '@keyflow/schemas';
import {
  backoffDelayMs,
  LOCAL_STEP_TIMEOUT_GRACE_MS,
  localStepTypes,
  retryPolicy,
  type AnyTaskContract,
  type WorkflowDefinition,
} from '@keyflow/workflow';
import {
  EXECUTOR_REDIS_OPTIONS,
  TaskExecutor,
  workerMetrics,
  type StoredOutcome,
} from '@keyflow/task-runtime';
import type { OrchestratorConfig } from '../config';
import type { LocalCommand } from './mapping';

/**
 * Local steps (`.local` in a definition; docs/workflows.md "Local steps"): their handlers run in the orchestrator
 * process, never under a partition's lock. The engine hands this runner a batch's local commands once the
 * transaction that dispatched them has committed (the step is durably `scheduled`, its step-timeout timer set); each
 * runs through the workers' own {@link TaskExecutor} (the idempotency lease and completion record keyed by
 * `<runId>/<stepId>`, the attempt timeout, in-process backoff, the error classes, the DLQ for refused input), which
 * publishes TaskCompleted/TaskFailed to task.results as a worker does (worker id `local/<instance>`); the engine
 * applies that result as any other. At least once: a crash loses the commands in memory, and the step timeout on
 * the run's next owner retries the step, which runs here again (a step whose first run was recorded is answered
 * from its record, with no second effect).
 */

/**
 * Local commands waiting for a runner slot, per slot of ORCHESTRATOR_LOCAL_STEP_CONCURRENCY: 64. A command beyond
 * that is not run here (logged); its step timeout retries the step (local steps are at least once). A waiting command
 * holds no idempotency lease: the runner takes a slot before the executor takes the lease.
 */
export const LOCAL_STEP_QUEUE_PER_SLOT = 64;

/** A local step's handler, registered in the orchestrator application by task type (see {@link localStep}). */
export interface LocalStepHandler {
  type: string;
  handler: TaskHandlerFn;
}

/**
 * A local step's handler: `localStep(contract, (input, ctx) => output)` (typed: its input parsed and its output
 * checked by the contract, as a worker's `@TaskHandler(contract)`), or `localStep(type, handler)` (untyped).
 */
export function localStep<C extends AnyTaskContract>(
  contract: C,
  handler: ContractHandlerMethod<C>,
): LocalStepHandler;
export function localStep(type: string, handler: TaskHandlerFn): LocalStepHandler;
export function localStep(
  a: string | AnyTaskContract,
  handler: TaskHandlerFn | ContractHandlerMethod<AnyTaskContract>,
): LocalStepHandler {
  if (typeof a === 'string') return { type: a, handler: handler as TaskHandlerFn };
  return { type: a.type, handler: checkedByContract(a, async (input, ctx) => handler(input, ctx)) };
}

/**
 * The definitions have a local step whose task type has no handler registered in the orchestrator application (or
 * one registered twice). Not retryable: the application must register it; the orchestrator refuses to start.
 */
export class LocalStepHandlerMissingError extends KeyflowError {
  readonly code = 'LOCAL_STEP_HANDLER_MISSING';
  readonly retryable = retryableOf('LOCAL_STEP_HANDLER_MISSING');
  constructor(reason: string) {
    super(`local steps: ${reason}`);
  }
}

/**
 * The local steps' handlers by task type, checked against the definitions.
 * @throws LocalStepHandlerMissingError when a definition's local step has no handler, or a type is registered twice
 */
export function localHandlersOf(
  definitions: Iterable<WorkflowDefinition>,
  handlers: readonly LocalStepHandler[],
): Map<string, TaskHandlerFn> {
  const byType = new Map<string, TaskHandlerFn>();
  for (const h of handlers) {
    if (byType.has(h.type)) throw new LocalStepHandlerMissingError(`task type ${h.type} is registered twice`);
    byType.set(h.type, h.handler);
  }
  const missing = [...localStepTypes(definitions)].filter((t) => !byType.has(t));
  if (missing.length)
    throw new LocalStepHandlerMissingError(
      `no handler registered in the orchestrator application for task type(s) ${missing.join(', ')} ` +
        '(pass them as localSteps: [localStep(contract, handler)])',
    );
  return byType;
}

/** What the runner needs of the orchestrator's wiring. */
export interface LocalStepDeps {
  cfg: OrchestratorConfig;
  kafka: Kafka;
  codec: EventCodec;
  claim: ClaimCheck;
  logger: Logger;
  registry: Registry;
  health: ComponentHealth;
}

/** Name of the local steps' result producer, as /health and the fatal log line name it. */
export const LOCAL_STEP_PRODUCER = 'local step producer';

/** Runs local steps' commands in process (see the file's comment); {@link start} before the engine consumes. */
export class LocalStepRunner {
  private producer?: Producer;
  private redis?: Redis;
  private executor?: TaskExecutor;
  private readonly running = new Set<Promise<void>>();
  /** Commands waiting for a slot (FIFO), at most {@link LOCAL_STEP_QUEUE_PER_SLOT} per slot. */
  private readonly queue: LocalCommand[] = [];
  private readonly draining = new AbortController();
  private readonly shutdown = new AbortController();
  private readonly hc = (redeliveries: number): HandleContext => ({
    signal: this.shutdown.signal,
    shutdown: this.shutdown.signal,
    draining: this.draining.signal,
    redeliveries,
  });
  /** A local command's offset (a sequence: it names the command in logs and DLQ triage only). */
  private seq = 0;
  private readonly backoff = retryPolicy({ initialDelayMs: 50, maxDelayMs: 1_000 });

  constructor(
    private readonly d: LocalStepDeps,
    private readonly handlers: Map<string, TaskHandlerFn>,
  ) {}

  /** Registers the local task types' schemas, connects the result producer and the idempotency store's Redis. */
  async start(): Promise<void> {
    const { cfg, codec, logger } = this.d;
    await codec.registerTopics([...this.handlers.keys()].map(taskTopic));
    this.producer = watchProducer(createIdempotentProducer(this.d.kafka), (err) =>
      this.d.health.fail(LOCAL_STEP_PRODUCER, err),
    );
    await connectUntilAnswered(this.producer, { what: LOCAL_STEP_PRODUCER, logger });
    // As the workers' store: no offline queue (a call fails at once while Redis is away, and is retried below).
    const redis = (this.redis = createRedis(cfg.redis!, EXECUTOR_REDIS_OPTIONS));
    redis.on('error', (err) => logger.warn({ err: err.message }, 'local steps: redis connection error'));
    const store = new IdempotencyStore<StoredOutcome>(redis, {
      keyPrefix: idempotencyKeyPrefix(cfg.KEYFLOW_TOPIC_PREFIX),
      leaseMs: cfg.ORCHESTRATOR_LOCAL_STEP_LEASE_MS,
      completionTtlMs: cfg.ORCHESTRATOR_LOCAL_STEP_COMPLETION_TTL_MS,
    });
    this.executor = new TaskExecutor({
      codec,
      producer: this.producer,
      results: new BatchingProducer(this.producer, { maxBytes: this.d.claim.thresholdBytes }),
      store,
      claimCheck: this.d.claim,
      handlers: this.handlers,
      logger,
      metrics: workerMetrics(this.d.registry),
      groupId: cfg.ORCHESTRATOR_GROUP_ID,
      maxConcurrentHandlers: cfg.ORCHESTRATOR_LOCAL_STEP_CONCURRENCY,
      workerId: `local/${cfg.ORCHESTRATOR_INSTANCE_ID}`,
    });
  }

  /**
   * Queues each command and starts as many as there are free slots (never waits for them): called by the engine
   * after the commit that dispatched them. At most ORCHESTRATOR_LOCAL_STEP_CONCURRENCY run at once; a command that
   * finds the queue full ({@link LOCAL_STEP_QUEUE_PER_SLOT} per slot) is dropped with a warning and left to its step
   * timeout, so memory stays bounded when local steps are slower than the engine dispatches them.
   */
  run(commands: LocalCommand[]): void {
    const max = LOCAL_STEP_QUEUE_PER_SLOT * this.d.cfg.ORCHESTRATOR_LOCAL_STEP_CONCURRENCY;
    for (const c of commands) {
      this.pump(); // free slots first: the bound counts only the commands that wait
      if (this.queue.length >= max) {
        this.d.logger.warn(
          { idempotencyKey: c.command.idempotencyKey, attempt: c.command.attempt, queued: this.queue.length },
          'local step queue full: the step timeout retries this step',
        );
        continue;
      }
      this.queue.push(c);
    }
    this.pump();
  }

  /** Starts queued commands while a slot is free (not once stopping: their step timeout retries them). */
  private pump(): void {
    while (
      this.running.size < this.d.cfg.ORCHESTRATOR_LOCAL_STEP_CONCURRENCY &&
      this.queue.length &&
      !this.draining.signal.aborted
    ) {
      const c = this.queue.shift()!;
      const p: Promise<void> = this.runOne(c)
        .catch((err: unknown) =>
          this.d.logger.error(
            { err, idempotencyKey: c.command.idempotencyKey },
            'local step failed before its handler: its step timeout retries it',
          ),
        )
        .finally(() => {
          this.running.delete(p);
          this.pump();
        });
      this.running.add(p);
    }
  }

  /**
   * One command through the executor, as a consumed message of its task topic (never produced). A rejection (Redis
   * away, the step's lease held by an instance that crashed while running it) is retried with backoff until the
   * command's budget is spent (attempt timeout + lease + {@link LOCAL_STEP_TIMEOUT_GRACE_MS}): by then the step
   * timeout has retried the step with a new command, and this one gives up.
   */
  private async runOne({ command, headers }: LocalCommand): Promise<void> {
    const logical = taskTopic(command.taskType);
    const m: ConsumedMessage = {
      topic: this.d.codec.physical(logical),
      partition: 0,
      offset: String(this.seq++),
      key: Buffer.from(command.runId),
      value: this.d.codec.encode(logical, 'TaskCommand', command),
      headers: headers ?? {},
      timestamp: String(Date.now()),
    };
    const giveUpAt =
      Date.now() +
      command.timeoutMs +
      this.d.cfg.ORCHESTRATOR_LOCAL_STEP_LEASE_MS +
      LOCAL_STEP_TIMEOUT_GRACE_MS;
    for (let n = 1; ; n++) {
      try {
        return await this.executor!.handle(m, this.hc(n - 1));
      } catch (err) {
        if (this.draining.signal.aborted || Date.now() >= giveUpAt) {
          this.d.logger.warn(
            { err, idempotencyKey: command.idempotencyKey, attempt: command.attempt },
            'local step not run here: its step timeout retries it',
          );
          return;
        }
        await abortableSleep(backoffDelayMs(this.backoff, Math.min(n, 20)), this.draining.signal).catch(
          () => undefined,
        );
      }
    }
  }

  /**
   * Stops: no new handler starts; running ones get `graceMs` to finish (their records and results written), then
   * their signal is aborted; then the producer and Redis are closed. What did not finish is retried by its step
   * timeout on the run's next owner.
   */
  async stop(graceMs = 5_000): Promise<void> {
    this.draining.abort(new ConsumerStoppingError(this.d.cfg.ORCHESTRATOR_GROUP_ID));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.running]),
      new Promise((r) => (timer = setTimeout(r, graceMs))),
    ]);
    clearTimeout(timer);
    this.shutdown.abort(new ConsumerStoppingError(this.d.cfg.ORCHESTRATOR_GROUP_ID));
    await this.producer?.disconnect().catch(() => undefined);
    this.redis?.disconnect();
  }
}
