import { hostname } from 'node:os';
import { blobRetentionMs, PayloadTooLargeError, payloadBlobKey, type ClaimCheck } from '@keyflow/blobs';
import {
  ContractError,
  derivedEventId,
  newMetadata,
  PayloadSerde,
  type EventCodec,
} from '@keyflow/contracts';
import { failureCode, isRetryable, textOf, toFailure } from '@keyflow/errors';
import {
  ForeignRecordError,
  type BeginResult,
  type IdempotencyStore,
  type Lease,
} from '@keyflow/idempotency';
import {
  abortableSleep,
  Semaphore,
  type BatchingProducer,
  type Producer,
  type ConsumedMessage,
  type HandleContext,
  type Message,
} from '@keyflow/kafka';
import { sendToDlq } from '@keyflow/ops';
import {
  context,
  INVALID_SPAN_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Span,
} from '@opentelemetry/api';
import {
  activeContextFollowsCalls,
  contextFromRecord,
  noTracerProvider,
  traceContextOf,
  traceHeaders,
  traceIdsOf,
  tracer,
  type Logger,
  type TraceContext,
} from '@keyflow/observability';
import type { Context } from '@opentelemetry/api';
import type { TaskCommand, TaskCompleted, TaskFailed } from '@keyflow/schemas';
import {
  DEAD_LETTERED,
  backoffDelayMs,
  retryPolicy,
  shouldRetry,
  type RetryPolicy,
  type RetryPolicyInput,
} from '@keyflow/workflow';
import {
  LeaseHeldError,
  LeaseLostError,
  OutputNotJsonError,
  StepCompensatedError,
  UnknownTaskTypeError,
} from './errors';
import { TaskInputError, TaskTimeoutError, type TaskContext, type TaskHandlerFn } from '@keyflow/handler';
import { LeaseRenewer } from './lease-renewer';
import { HandlerSlots, type SlotStep } from './handler-slots';
import { AbortFanout, AttemptSignals, type AttemptSignal } from './attempt-signals';
import { decodeTask, taskInput } from './task-decode';
import type { WorkerMetrics } from './metrics';
import type { FlowLimiter, FlowPermit } from './flow-limiter';
import { FlowWaitReports } from './flow-wait-reports';
import { Topic, type TaskTopic } from '@keyflow/schemas';

/**
 * Outcome stored in the completion record, so a redelivery re-publishes it without running the handler. An output
 * over the claim-check threshold is stored as a blob before the record is written, and the record holds its
 * reference (`outputRef`, `blob:<key>`, with `output` empty), never the body: records stay small in Redis (whose
 * memory bounds them) and a replay publishes the same reference. Records of earlier versions may hold a large
 * `output` inline; publishing offloads it then.
 */
export type StoredOutcome =
  | { kind: 'completed'; output: string; outputRef?: string; durationMs: number }
  | { kind: 'failed'; error: TaskFailed['error'] };

export interface ExecutorOptions {
  codec: EventCodec;
  producer: Producer;
  /** Publishes result events, coalescing concurrent sends into one request. */
  results: BatchingProducer;
  store: IdempotencyStore<StoredOutcome>;
  /**
   * Size limits: an output over half of max.message.bytes goes to the blob store (TaskCompleted.outputRef), a
   * command's inputRef is resolved before the handler runs.
   */
  claimCheck: ClaimCheck;
  handlers: Map<string, TaskHandlerFn>;
  logger: Logger;
  metrics: WorkerMetrics;
  groupId: string;
  /** Backoff between in-process attempts; maxAttempts comes from each command. */
  retry?: RetryPolicyInput;
  /**
   * Handler calls running at once (WORKER_MAX_CONCURRENT_HANDLERS). Attempts past it wait, lease held, for a slot;
   * an attempt's timeout starts when its handler does.
   */
  maxConcurrentHandlers: number;
  /**
   * Handler calls running at once for the tasks of one topic partition (WORKER_MAX_HANDLERS_PER_PARTITION), so that a
   * partition whose handlers all hang never holds every slot (see {@link HandlerSlots}). Unset: no such bound.
   */
  maxHandlersPerPartition?: number;
  /** Source of randomness for jitter (tests). */
  random?: () => number;
  /**
   * Flow control of limited task types (WORKER_FLOW_LIMITS): each attempt of such a type waits for its admission,
   * lease held, before it takes a handler slot; its attempt timeout starts when its handler does.
   */
  flow?: FlowLimiter;
  /**
   * Interval of the TaskWaiting reports of an attempt waiting for its flow-control admission, in ms
   * (WORKER_FLOW_WAIT_REPORT_MS; see {@link FlowWaitReports}). Unset or 0: no reports (the step's deadline then
   * counts the wait).
   */
  flowWaitReportMs?: number;
  /** The worker id results carry (default `<host>/<pid>`; the orchestrator's local steps: `local/<instance>`). */
  workerId?: string;
}

const defaultWorkerId = `${hostname()}/${process.pid}`;

/**
 * Most messages one wave takes ({@link TaskExecutor.handle}); the rest of a turn's messages wait for the next turns,
 * in order; the same holds for the tasks leased after a schema fetch ({@link TaskExecutor.leaseLater}). It bounds
 * every begin script call to 128 keys, so one call never holds Redis (single-threaded) for the whole in-flight
 * bound, and it breaks the convoy a backlog makes: with every in-flight message in one wave, the wave went
 * through its begin call, its handlers, its complete call and its send in lockstep, and the worker's main thread
 * idled through each round trip (30 % of it in a drain, `bench:worker --profile`). In parts over turns, one part is
 * decoded and its handlers run while another part's call is at Redis or its results at the broker.
 *
 * Measured with `bench:worker` (docs/benchmarks/history.md): at 65 us of CPU a task (2026-12-07 01:00 UTC) 64 gave
 * +21 % tasks/s over no split, and 16, 32 and 128 did no better. Once the per-task work was down to about 35 us, each
 * wave's own cost (two script calls, one produce request, their socket writes: about 200 us a wave, 3 us a task at
 * 64) weighed more: 128 took 11-13 % less CPU a task (medians, backlogs of 60,000 and 200,000, alternated with 64,
 * 2026-12-07 17:37-18:12 UTC), with two waves in flight at the default bounds (4 partitions x 64); 256 less CPU again,
 * but one wave then held nearly every in-flight message and the worker idled in lockstep: no more tasks/s than 64.
 */
export const MAX_WAVE_TASKS = 128;

/** The first {@link MAX_WAVE_TASKS} items of `queue` (a wave) and the rest, in order; `queue` is not changed. */
function firstWave<T>(queue: T[]): [wave: T[], rest: T[]] {
  if (queue.length <= MAX_WAVE_TASKS) return [queue, []];
  return [queue.slice(0, MAX_WAVE_TASKS), queue.slice(MAX_WAVE_TASKS)];
}

/**
 * The ioredis options of the idempotency store's connection an executor runs on (the workers', the orchestrator's
 * local steps'): no offline queue, so a call fails at once while Redis is away and the caller retries it with its
 * backoff; concurrent tasks' lease calls share round trips (auto-pipelining); reconnects back off up to 1 s.
 */
export const EXECUTOR_REDIS_OPTIONS = {
  enableOfflineQueue: false,
  enableAutoPipelining: true,
  maxRetriesPerRequest: 1,
  retryStrategy: (n: number) => Math.min(50 * n, 1_000),
} as const;

/**
 * Runs one task command end to end: decode, idempotency lease, attempts with timeout and backoff, completion
 * record, result event. Non-decodable commands, unknown task types and bad input go to `<topic>.dlq`.
 *
 * Order of effects, chosen so a crash at any point loses nothing and runs nothing twice that was recorded:
 * handler -> completion record (Redis, written only while the lease is held) -> result event (acks=all) -> offset
 * commit (by the runner). A crash before the record re-runs the handler after the lease expires (side effects must
 * use the idempotency key); after the record, a redelivery re-publishes the stored result with `replayed = true`.
 *
 * One effect per logical step (docs/workflows.md "One effect per logical step"): the idempotency key names the step, not the
 * attempt, so a later attempt, a redrive or a run retry finds the earlier one's lease (and waits) or its completion
 * record (and re-publishes it under its own attempt number). A compensation first fences the key of the step it
 * undoes, so a command of that step still queued or redriven later is answered with StepCompensatedError and never
 * runs. A lease renewal that finds another holder aborts the handler's signal; so does a revoked partition. The
 * signal only asks: a handler is never abandoned, and the lease is held until it settles (a handler that ignores
 * its signal delays its key, it never runs twice at once).
 */
export class TaskExecutor {
  private readonly policy: RetryPolicy;
  /** Bytes to a command and its input: the contracts' one payload serde. */
  private readonly serde: PayloadSerde;
  private readonly renewer: LeaseRenewer;
  /** The worker id results carry (ExecutorOptions.workerId). */
  private readonly workerId: string;

  /** The tasks' listeners on their partitions' revocation and their consumer's drain, one listener per signal. */
  private readonly aborts = new AbortFanout();

  /** Slots of handler calls (see ExecutorOptions.maxConcurrentHandlers and maxHandlersPerPartition). */
  private readonly handlerSlots: HandlerSlots;

  constructor(private readonly o: ExecutorOptions) {
    this.serde = new PayloadSerde(o.codec, o.claimCheck);
    this.policy = retryPolicy(o.retry ?? { initialDelayMs: 100, maxDelayMs: 5_000 });
    this.renewer = new LeaseRenewer(o.store, o.logger);
    this.handlerSlots = new HandlerSlots(
      o.maxConcurrentHandlers,
      o.maxHandlersPerPartition ?? o.maxConcurrentHandlers,
    );
    this.workerId = o.workerId ?? defaultWorkerId;
  }

  /** Handler calls running now, and attempts waiting for a slot (for the gauges). */
  handlerStats(): { running: number; waiting: number } {
    return {
      running: this.handlerSlots.running,
      waiting: this.handlerSlots.waiting,
    };
  }

  /**
   * The metric children of the hot path, per task type, and the successful attempts not yet added to them
   * ({@link flushCounts}): prom-client hashes the labels on every labelled call, so a wave's successes are added in
   * one call per counter instead of one per task.
   */
  private readonly counters = new Map<string, TypeCounters>();

  private countersOf(type: string): TypeCounters {
    let c = this.counters.get(type);
    if (!c) {
      const m = this.o.metrics;
      c = {
        handlerSeconds: m.handlerSeconds.labels({ type }),
        attemptsOk: m.attempts.labels({ type, result: 'ok' }),
        completed: m.tasks.labels({ type, outcome: 'completed' }),
        unflushedOk: 0,
      };
      this.counters.set(type, c);
    }
    return c;
  }

  /**
   * Adds the successful attempts counted since the last call to their counters (attempts `ok`, tasks `completed`).
   * Called before a wave's results are sent ({@link recordWave}: every success queues its record, so it gets there),
   * so a result on task.results is never ahead of its count. A success whose output blob write is cut short by
   * shutdown (see offloaded) is added with the next wave, or not at all when none comes.
   */
  private flushCounts(): void {
    for (const c of this.counters.values()) {
      if (c.unflushedOk === 0) continue;
      c.attemptsOk.inc(c.unflushedOk);
      c.completed.inc(c.unflushedOk);
      c.unflushedOk = 0;
    }
  }

  /** The logical topic of a physical task topic (`<prefix>task.x` -> `task.x`): the worker reads task topics only. */
  private logical(topic: string): TaskTopic {
    return (this.o.codec.logical(topic) ?? topic) as TaskTopic;
  }

  /**
   * Handles one message for the ordered consumer. Rejects only for infrastructure failures (retried in place), or
   * when the consumer drains before the task's handler started (ConsumerStoppingError: given up, redelivered).
   *
   * One path for every message: those handed over in one turn of the event loop (the ordered consumer dispatches a
   * fetched batch's messages, up to its in-flight bounds, in one turn) are handled in waves of at most
   * {@link MAX_WAVE_TASKS} (the rest in the next turns, in order), a single message being a wave of one: each
   * decoded once ({@link decodeTask}, without a turn when its schema is known), one begin script call for all their
   * leases, their handlers run side by side, one complete script call for the records of those
   * that finish together, and their results in one send. Each message still resolves on its own, once its result
   * is acknowledged, so the ordered consumer's per-key order and prefix commits are unchanged. A message that needs
   * a step of its own first joins a later wave (after a schema fetch: with the others that waited for it; after a
   * compensation's fence: a wave of one); a result that cannot go in the shared send (a redelivery's stored result,
   * an output too large to go inline) is published alone, and a Redis error while recording writes that task's
   * record alone, retried.
   */
  handle(m: ConsumedMessage, hc: HandleContext): Promise<void> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ m, hc, resolve, reject });
      if (this.waiting.length === 1) setImmediate(() => void this.runWave());
    });
  }

  /** Messages handed to {@link handle} and not yet taken by a wave (see {@link runWave}), in the order handed. */
  private waiting: Waiting[] = [];
  /** Tasks decoded after a schema fetch, waiting for their shared begin call (see {@link leaseLater}). */
  private late: Task[] = [];
  /** Tasks whose attempts ended, waiting for the next shared complete call (see {@link recordWave}). */
  private recording: Recorded[] = [];

  /**
   * Handles the first {@link MAX_WAVE_TASKS} messages of those waiting (see {@link handle}), the rest in the next
   * turn. Never rejects: every message settles on its own.
   */
  private async runWave(): Promise<void> {
    const [wave, rest] = firstWave(this.waiting);
    // The rest waits for the next turn, in order; nothing else schedules a wave while this.waiting is not empty.
    this.waiting = rest;
    if (rest.length > 0) setImmediate(() => void this.runWave());
    const leasing: Task[] = [];
    for (const w of wave) this.admit(w, leasing);
    if (leasing.length > 0) await this.lease(leasing);
  }

  /**
   * Decodes a message once and routes its command (see {@link route}): with the wave's `leasing` when it decodes
   * without a turn, else once its schema is fetched, with the others that waited for it. A message that is no command of its topic goes
   * to the DLQ (see {@link undecodable}).
   */
  private admit(w: Waiting, leasing: Task[]): void {
    let cmd: TaskCommand | Promise<TaskCommand>;
    try {
      cmd = decodeTask(this.serde, this.logical(w.m.topic), w.m);
    } catch (e) {
      return settle(w, this.undecodable(w.m, e));
    }
    if (!(cmd instanceof Promise)) return this.route(cmd, w, leasing);
    cmd.then(
      (c) => this.route(c, w, undefined),
      (e: unknown) => settle(w, this.undecodable(w.m, e)),
    );
  }

  /** A message no codec makes a command of: to the DLQ when that is for good, else rejected (retried in place). */
  private undecodable(m: ConsumedMessage, e: unknown): Promise<void> {
    if (e instanceof ContractError && !e.retryable)
      return this.deadLetter(m, e, 1, Date.now(), 'undecodable');
    return Promise.reject(e);
  }

  /**
   * Starts a decoded command's task (its span, context and logger) and routes it: an unknown task type to the DLQ,
   * a compensation to its fence first (then a wave of one), any other command to `leasing` (the wave's), or, without
   * one (decoded after a schema fetch), to {@link leaseLater}. Settles the message however the task ends.
   */
  private route(cmd: TaskCommand, w: Waiting, leasing: Task[] | undefined): void {
    let t: Task;
    try {
      t = this.task(cmd, w.m, w.hc, w);
    } catch (e) {
      return w.reject(e); // not started: retried in place by the ordered consumer
    }
    if (!this.o.handlers.has(cmd.taskType))
      settleTask(
        t,
        context.with(t.context, () =>
          this.deadLetterTask(t, new UnknownTaskTypeError(cmd.taskType), 1, Date.now()),
        ),
      );
    else if (cmd.compensates)
      context
        .with(t.context, () => this.fenceThenBegin(t, cmd.compensates!))
        .catch((e: unknown) => failTask(t, e));
    else if (leasing) leasing.push(t);
    else this.leaseLater(t);
  }

  /**
   * Leases `t` with the other tasks that decoded after a schema fetch in this turn (the messages of a wave that
   * waited for the same schema), in one begin call at the turn's end.
   */
  private leaseLater(t: Task): void {
    this.late.push(t);
    if (this.late.length === 1) setImmediate(() => this.leaseLate());
  }

  /** Leases the first {@link MAX_WAVE_TASKS} tasks of {@link late}, the rest in the next turn (as runWave does). */
  private leaseLate(): void {
    const [late, rest] = firstWave(this.late);
    this.late = rest;
    if (rest.length > 0) setImmediate(() => this.leaseLate());
    void this.lease(late);
  }

  /** Takes the leases of `tasks` in one begin call, then goes on with each (see {@link begun}); never rejects. */
  private async lease(tasks: Task[]): Promise<void> {
    this.o.metrics.waveTasks.observe(tasks.length);
    let begun: Awaited<ReturnType<IdempotencyStore<StoredOutcome>['beginMany']>>;
    try {
      begun = await this.o.store.beginMany(
        tasks.map((t) => ({ key: t.cmd.idempotencyKey, attempt: t.cmd.attempt })),
      );
    } catch (e) {
      for (const t of tasks) failTask(t, e);
      return;
    }
    for (let i = 0; i < tasks.length; i++)
      context.with(tasks[i].context, this.begun, this, tasks[i], begun[i]);
  }

  /**
   * A task after its begin: dead-lettered, answered without a lease, or run under its lease and recorded. Settles the
   * task's message however it ends (see {@link settleTask}); never throws.
   */
  private begun(t: Task, b: BeginAnswer): void {
    // A value this store did not write sits on the key: no retry fixes that, the command goes to the DLQ.
    if (b instanceof ForeignRecordError) return settleTask(t, this.deadLetterTask(t, b, 0, Date.now()));
    if (b instanceof Error) return failTask(t, b); // Redis did not answer: retried in place
    if (b.state !== 'acquired') return settleTask(t, this.afterBegin(t, b));
    // No promise of its own per task: the outcome joins the next shared record call, which settles the task.
    this.runLeased(t, b.lease).then(
      (ran) => (ran ? this.queueRecord(ran) : taskDone(t)),
      (e: unknown) => failTask(t, e),
    );
  }

  /**
   * A compensation: fences the step it undoes first (after this no command of that step runs; a running one
   * finishes first: LeaseHeldError, retried in place), then begins as a wave of one.
   */
  private async fenceThenBegin(t: Task, undone: string): Promise<void> {
    try {
      const fence = await this.o.store.fence(undone, t.cmd.idempotencyKey);
      if (fence.state === 'running') throw new LeaseHeldError(undone, fence.expiresInMs);
    } catch (e) {
      // A value this store did not write sits on the key: no retry fixes that, the command goes to the DLQ.
      if (e instanceof ForeignRecordError) return settleTask(t, this.deadLetterTask(t, e, 0, Date.now()));
      throw e;
    }
    this.o.metrics.waveTasks.observe(1);
    const [b] = await this.o.store.beginMany([{ key: t.cmd.idempotencyKey, attempt: t.cmd.attempt }]);
    this.begun(t, b); // settles the task
  }

  /**
   * A task's span, context and logger. The task's span continues the command's trace (its headers, else its
   * metadata); everything below runs in it, so the attempts' and the handler's spans are its children, the result
   * carries its context, and log lines carry its ids. The context is also passed explicitly: where the active
   * context does not follow async calls (the worker without a trace exporter, see startTracing), it is the only
   * way it gets there.
   */
  private task(cmd: TaskCommand, m: ConsumedMessage, hc: HandleContext, waiting: Waiting): Task {
    const parent = contextFromRecord(m.headers, cmd.metadata);
    // With no tracer provider, the task span would be a no-op carrying the parent's span context: the parent context
    // is then the task's as it is, and no span, attributes or context are made (see noTracerProvider).
    if (noTracerProvider())
      return this.taskIn(cmd, m, hc, trace.getSpan(parent) ?? UNRECORDED_SPAN, parent, waiting);
    const span = tracer().startSpan(
      `keyflow.task ${cmd.taskType}`,
      {
        kind: SpanKind.CONSUMER,
        attributes: {
          'messaging.system': 'kafka',
          'messaging.destination.name': m.topic,
          'messaging.destination.partition.id': String(m.partition),
          'messaging.kafka.offset': Number(m.offset),
          'keyflow.run_id': cmd.runId,
          'keyflow.step_id': cmd.stepId,
          'keyflow.task_type': cmd.taskType,
          'keyflow.step_attempt': cmd.attempt,
          'keyflow.idempotency_key': cmd.idempotencyKey,
        },
      },
      parent,
    );
    return this.taskIn(cmd, m, hc, span, trace.setSpan(parent, span), waiting);
  }

  /** The task of `cmd` in its span and that span's context, with its logger. */
  private taskIn(
    cmd: TaskCommand,
    m: ConsumedMessage,
    hc: HandleContext,
    span: Span,
    taskContext: Context,
    waiting: Waiting,
  ): Task {
    // Built on first use: most tasks log nothing, and a pino child serialises its bindings when it is made.
    let child: Logger | undefined;
    const log = (): Logger =>
      (child ??= this.o.logger.child({
        correlationId: cmd.runId,
        causationId: cmd.metadata.eventId,
        taskType: cmd.taskType,
        stepId: cmd.stepId,
        topic: m.topic,
        partition: m.partition,
        offset: m.offset,
        // Log lines get the active span's ids from the logger's mixin; without an active context, the task span's.
        ...(activeContextFollowsCalls() ? {} : traceIdsOf(taskContext)),
      }));
    return { cmd, m, hc, span, context: taskContext, log, waiting };
  }

  /** A begin that took no lease: the step was fenced, completed (re-published), or runs elsewhere (retried). */
  private async afterBegin(
    t: Task,
    begin: Exclude<BeginResult<StoredOutcome>, { state: 'acquired' }>,
  ): Promise<void> {
    const { cmd } = t;
    if (begin.state === 'fenced') {
      this.o.metrics.fenced.inc({ type: cmd.taskType });
      const err = new StepCompensatedError(cmd.idempotencyKey, begin.by);
      t.log().warn({ idempotencyKey: cmd.idempotencyKey, by: begin.by }, err.message);
      const now = Date.now();
      return this.publish(t, { kind: 'failed', error: failure(err, false, 1, now, now) }, false);
    }
    if (begin.state === 'completed') {
      this.o.metrics.replayed.inc({ type: cmd.taskType });
      t.log().info(
        { idempotencyKey: cmd.idempotencyKey },
        'redelivered command already completed: re-publishing the stored result',
      );
      return this.publish(t, storedOutcome(begin.result, cmd.idempotencyKey), true);
    }
    throw new LeaseHeldError(cmd.idempotencyKey, begin.expiresInMs);
  }

  /**
   * Runs the attempts under `lease`, renewed meanwhile. Resolves with the outcome to record (the lease still
   * renewed until `unwatch`), or undefined when the command went to the DLQ (lease released). Rejects when
   * shutdown, revocation or a lost lease interrupted the attempts (lease released if still ours).
   */
  private async runLeased(t: Task, lease: Lease): Promise<Recorded | undefined> {
    const { cmd } = t;
    const handler = this.o.handlers.get(cmd.taskType)!;
    // Shutdown, revocation (hc.signal) and a lost lease stop the attempts; each attempt has its own signal.
    const stop = new AttemptSignals();
    const unwatch = this.renewer.watch(lease, (reason) => {
      // Counted and logged also after a stop: a handler that ignores its signal may now run beside a new holder.
      this.o.metrics.leaseLost.inc({ type: cmd.taskType });
      t.log().warn(
        { idempotencyKey: cmd.idempotencyKey, reason },
        'lease lost while running: aborting the handler',
      );
      stop.stop(new LeaseLostError(cmd.idempotencyKey, reason));
    });
    const unlink = this.aborts.on(t.hc.signal, () => stop.stop(t.hc.signal.reason));
    let outcome: AttemptsOutcome;
    try {
      outcome = await this.runAttempts(t, handler, stop);
    } catch (e) {
      unwatch();
      unlink();
      // Shutdown, revocation or a lost lease interrupted the attempts: give the lease back (if still ours) so the
      // redelivery or the in-place retry runs at once.
      await this.o.store.release(lease).catch(() => undefined);
      throw e;
    }
    unlink();
    if (outcome.kind === 'dlq') {
      unwatch();
      await this.o.store.release(lease).catch(() => undefined);
      await this.deadLetterTask(t, outcome.error, outcome.attempts, outcome.firstFailureAt);
      return undefined;
    }
    if (outcome.kind === 'completed' && !this.o.claimCheck.fitsInline(outcome.output))
      try {
        outcome = await this.offloaded(t, outcome);
      } catch (e) {
        // Shutdown interrupted the blob write: as above, the lease goes back.
        unwatch();
        await this.o.store.release(lease).catch(() => undefined);
        throw e;
      }
    return { t, lease, outcome, unwatch };
  }

  /**
   * The outcome the completion record stores for an output over the claim-check threshold: the output written as a
   * blob first (retried in place while the blob store does not answer, the lease still renewed) and its reference
   * kept; an output the claim check cannot carry becomes the non-retryable failure PAYLOAD_TOO_LARGE.
   */
  private async offloaded(
    t: Task,
    outcome: Extract<StoredOutcome, { kind: 'completed' }>,
  ): Promise<StoredOutcome> {
    const { cmd } = t;
    let stored: StoredOutcome = outcome;
    await this.untilDone('store the output blob', t.hc.shutdown, t.log, async () => {
      try {
        const checked = await this.o.claimCheck.offload(
          `output of ${cmd.idempotencyKey}`,
          () => payloadBlobKey('results', cmd.runId, cmd.idempotencyKey),
          outcome.output,
          blobRetentionMs(),
        );
        stored = checked.ref
          ? { kind: 'completed', output: '', outputRef: checked.ref, durationMs: outcome.durationMs }
          : outcome;
      } catch (e) {
        if (!(e instanceof PayloadTooLargeError)) throw e;
        stored = this.tooLarge(t, e);
      }
    });
    return stored;
  }

  /** The failure an output the claim check cannot carry becomes (counted and logged). */
  private tooLarge(t: Task, e: PayloadTooLargeError): StoredOutcome {
    this.o.metrics.tasks.inc({ type: t.cmd.taskType, outcome: 'too_large' });
    t.log().warn(
      { idempotencyKey: t.cmd.idempotencyKey, code: e.code, err: e.message },
      'output too large for its topic and the claim check: the step fails',
    );
    const now = Date.now();
    return { kind: 'failed', error: failure(e, false, 1, now, now) };
  }

  /**
   * Writes the completion record, then publishes the result, one task alone. The lease stays renewed until the
   * record is written (a Redis outage must not let it lapse into a re-run), and a revoked partition does not stop
   * the write: the step ran, its record must exist for the new owner.
   */
  private async recordAndPublish(r: Recorded): Promise<void> {
    const { t, lease, outcome } = r;
    let held = true;
    try {
      await this.untilDone('store the completion record', t.hc.shutdown, t.log, async () => {
        held = await this.o.store.complete(lease, outcome, outcome.kind === 'completed');
      });
    } finally {
      r.unwatch();
    }
    if (!held) throw this.recordRefused(t);
    return this.publish(t, outcome, false);
  }

  /** Someone else may hold the step now: nothing of ours is published; the in-place retry finds its outcome. */
  private recordRefused(t: Task): LeaseLostError {
    this.o.metrics.leaseLost.inc({ type: t.cmd.taskType });
    return new LeaseLostError(t.cmd.idempotencyKey, 'another holder took it before the record was written');
  }

  /**
   * Queues a task's outcome for the next shared complete call ({@link recordWave}), which settles the task's message
   * once its result is acknowledged (or its record or result fails).
   */
  private queueRecord(r: Recorded): void {
    this.recording.push(r);
    if (this.recording.length === 1) setImmediate(() => void this.recordWave());
  }

  /**
   * The completion records of the tasks whose attempts ended in this turn, in one complete call, then their results
   * in one send. A Redis error records each task alone (recordAndPublish: it retries the write); an output too large to go
   * inline is published alone (the claim check stores it).
   */
  private async recordWave(): Promise<void> {
    const batch = this.recording;
    this.recording = [];
    this.flushCounts();
    // Whatever happens to one task (a record refused, a result that cannot be encoded) settles that task alone.
    const oneByOne = (r: Recorded) =>
      settleTask(
        r.t,
        context.with(r.t.context, () => this.recordAndPublish(r)),
      );
    let held: Awaited<ReturnType<IdempotencyStore<StoredOutcome>['completeMany']>>;
    try {
      held = await this.o.store.completeMany(
        batch.map((r) => ({ lease: r.lease, result: r.outcome, ok: r.outcome.kind === 'completed' })),
      );
    } catch {
      for (const r of batch) oneByOne(r);
      return;
    }
    const inline: Task[] = [];
    const messages: Message[] = [];
    batch.forEach((r, i) => {
      const written = held[i];
      // Redis did not answer this call: recordAndPublish retries the write alone (the lease is still renewed).
      if (written instanceof Error) return oneByOne(r);
      r.unwatch();
      try {
        if (!written) throw this.recordRefused(r.t);
        if (r.outcome.kind === 'completed' && !this.o.claimCheck.fitsInline(r.outcome.output))
          return settleTask(
            r.t,
            context.with(r.t.context, () => this.publish(r.t, r.outcome, false)),
          );
        const checked =
          r.outcome.kind === 'completed'
            ? { inline: r.outcome.output, ref: r.outcome.outputRef ?? null }
            : { inline: '', ref: null };
        messages.push(this.resultMessage(r.t, r.outcome, false, checked));
        inline.push(r.t);
      } catch (e) {
        failTask(r.t, e); // retried in place, as when a publish alone fails
      }
    });
    if (inline.length === 0) return;
    // One callback for the send's tasks, not one per task.
    this.o.results.sendAll(this.o.codec.physical(Topic.TASK_RESULTS), messages).then(
      () => {
        for (const t of inline) taskDone(t);
      },
      (e: unknown) => {
        for (const t of inline) failTask(t, e);
      },
    );
  }

  /**
   * Runs a leased task's attempts: its input read once ({@link taskInput}), then its handler, retried with backoff
   * while the retry policy and the command's maxAttempts allow. Resolves with the outcome (a `dlq` one for input
   * that is not JSON or a TaskInputError); rejects with the stop's reason when shutdown, revocation or a lost lease
   * stopped the attempts, or ConsumerStoppingError when the drain began before the first handler started.
   */
  private async runAttempts(t: Task, handler: TaskHandlerFn, stop: AttemptSignals): Promise<AttemptsOutcome> {
    const { cmd } = t;
    // Inline input is parsed without a turn; one behind a claim check is read from the blob store first.
    const read = taskInput(this.serde, cmd);
    const input = read instanceof Promise ? await read : read;
    if (input instanceof Error)
      return { kind: 'dlq' as const, error: input, attempts: 0, firstFailureAt: Date.now() };
    const maxAttempts = Math.max(1, cmd.maxAttempts);
    const traced = trace.getSpan(t.context)?.isRecording() === true;
    const part = this.handlerSlots.partition(t.m.topic, t.m.partition);
    /** Handler time across attempts (TaskCompleted.durationMs): not the waits for a slot, nor the backoffs. */
    let handlerMs = 0;
    let firstFailureAt = 0;
    for (let attempt = 1; ; attempt++) {
      // Draining stops only a task whose handler has not run yet; one between attempts goes on as before.
      const draining = attempt === 1 ? t.hc.draining : undefined;
      const limited = this.o.flow?.limits(cmd.taskType) === true;
      // A flow-limited task takes its partition's handler slot before its admission: a task waiting behind its
      // partition's handlers must not hold a flow permit (a share of its type across every worker) meanwhile.
      const early = limited && part !== undefined;
      if (early) {
        const slot = this.handlerSlot(part, stop, draining, 'partition');
        if (slot) await slot;
      }
      let permit: FlowPermit | undefined;
      try {
        if (limited) permit = await this.flowAdmission(t, input, stop, draining);
        const slot = this.handlerSlot(part, stop, draining, early ? 'process' : 'both');
        if (slot) await slot;
      } catch (e) {
        if (permit) this.o.flow!.release(permit);
        if (early) this.handlerSlots.release(part, 'partition');
        throw e;
      }
      // Everything from here runs inside the try, so the slot is given back whatever throws; it is given back as
      // soon as the handler settles (before any backoff), at most once, and the handler's time is counted then.
      const a = new Attempt(this.handlerSlots, part, permit && (() => this.o.flow!.release(permit)));
      try {
        const result = await this.callHandler(t, handler, input, attempt, stop, traced, a);
        handlerMs += a.release();
        // Serialised here, so an output JSON cannot hold fails this attempt (not retried) instead of the record.
        const output = outputJson(result, cmd.idempotencyKey);
        a.observe();
        a.counters!.unflushedOk++;
        return { kind: 'completed' as const, output, durationMs: handlerMs };
      } catch (raw) {
        handlerMs += a.release();
        a.failed(raw);
        if (stop.stopped) throw stop.reason ?? raw;
        const err = raw instanceof Error ? raw : new Error(textOf(raw));
        const now = Date.now();
        firstFailureAt ||= now;
        const next = this.afterFailure(t, err, attempt, maxAttempts, firstFailureAt, now);
        if (typeof next !== 'number') return next;
        await abortableSleep(next, stop.next().signal);
      } finally {
        handlerMs += a.release();
        a.dispose();
      }
    }
  }

  /**
   * Calls the handler for attempt `attempt` and returns what it returns (a promise, awaited by
   * {@link runAttempts}). The attempt's timeout, timer and spans start here, with its handler, not with its wait for
   * a slot; they are kept on `a` for the attempt's end.
   */
  private callHandler(
    t: Task,
    handler: TaskHandlerFn,
    input: unknown,
    attempt: number,
    stop: AttemptSignals,
    traced: boolean,
    a: Attempt,
  ): Promise<unknown> {
    const { cmd, log } = t;
    const signals = (a.signal = stop.attempt(
      cmd.timeoutMs,
      () => new TaskTimeoutError(`attempt ${attempt} exceeded ${cmd.timeoutMs} ms`),
    ));
    a.counters = this.countersOf(cmd.taskType);
    a.timerStart = performance.now();
    // The attempt's and the handler's spans are children of the task span, made only when it is recorded: with no
    // trace exporter, or the task not sampled (every standard sampler then drops its children too), the handler runs
    // in the task's context, whose trace context is the one the children would have passed on.
    if (traced)
      a.attemptSpan = tracer().startSpan(
        'keyflow.task.attempt',
        { attributes: { 'keyflow.attempt': attempt, 'keyflow.timeout_ms': cmd.timeoutMs } },
        t.context,
      );
    const attemptContext = traced ? trace.setSpan(t.context, a.attemptSpan) : t.context;
    if (traced) a.handlerSpan = tracer().startSpan(`keyflow.handler ${cmd.taskType}`, {}, attemptContext);
    // The handler is never abandoned: its signal asks it to stop (timeout, shutdown, revocation, lost lease), and the
    // lease is held until it has settled, so no other attempt or worker runs the step meanwhile. A handler that
    // ignores its signal and succeeds anyway has had its effect: its result is recorded and published.
    const handlerContext = traced ? trace.setSpan(attemptContext, a.handlerSpan) : t.context;
    a.started = Date.now();
    const ctx = new AttemptContext(cmd, attempt, signals, log, handlerContext);
    return context.with(handlerContext, handler, undefined, input, ctx);
  }

  /**
   * What follows a failed attempt (counted): the backoff delay in ms before the next one when the retry policy
   * allows it, else the outcome: `dlq` for a TaskInputError, `failed` (with the error record) for anything else.
   */
  private afterFailure(
    t: Task,
    err: Error,
    attempt: number,
    maxAttempts: number,
    firstFailureAt: number,
    now: number,
  ): AttemptsOutcome | number {
    const { cmd } = t;
    this.o.metrics.attempts.inc({ type: cmd.taskType, result: err.name });
    if (err instanceof TaskInputError)
      return { kind: 'dlq' as const, error: err, attempts: attempt, firstFailureAt };
    const retryable = isRetryable(err, true);
    const policy = { ...this.policy, maxAttempts };
    if (shouldRetry(policy, attempt, err.name, retryable)) {
      const delay = backoffDelayMs(policy, attempt, this.o.random);
      this.o.metrics.retries.inc({ type: cmd.taskType });
      t.log().warn(
        { attempt, maxAttempts, errorClass: err.name, err: err.message, retryInMs: delay },
        'task attempt failed; retrying',
      );
      return delay;
    }
    this.o.metrics.tasks.inc({ type: cmd.taskType, outcome: 'failed' });
    t.log().warn({ attempt, errorClass: err.name, err: err.message, retryable }, 'task failed for good');
    return { kind: 'failed' as const, error: failure(err, retryable, attempt, firstFailureAt, now) };
  }

  /**
   * Waits for the flow-control admission of an attempt (ExecutorOptions.flow), lease held and renewed, in its type's
   * line: never failed or timed out by the limit or its store. An attempt that has to wait reports it on task.results
   * (TaskWaiting, see {@link FlowWaitReports}; not one admitted at once), so the step's deadline starts at its
   * admission. Rejects, holding nothing, with the stop's reason when the attempts stop, or with ConsumerStoppingError
   * when `draining` aborts first (the message is redelivered).
   */
  private flowAdmission(
    t: Task,
    input: unknown,
    stop: AttemptSignals,
    draining?: AbortSignal,
  ): Promise<FlowPermit> {
    const flow = this.o.flow!;
    if (stop.stopped) return Promise.reject(stop.reason ?? new Error('stopping'));
    const cancel = new AbortController();
    const offStop = stop.onStop((reason) => cancel.abort(reason));
    const offDrain = draining ? this.aborts.on(draining, () => cancel.abort(draining.reason)) : undefined;
    if (draining?.aborted) cancel.abort(draining.reason);
    const key = flow.keyOf(t.cmd.taskType, input, t.cmd.runId);
    const every = this.o.flowWaitReportMs ?? 0;
    let reports: FlowWaitReports | undefined;
    const onWait =
      every > 0
        ? () => {
            reports = new FlowWaitReports(
              {
                codec: this.o.codec,
                results: this.o.results,
                intervalMs: every,
                workerId: this.workerId,
                logger: t.log(),
              },
              t.cmd,
              traceContextOf(t.context),
            );
          }
        : undefined;
    return flow
      .admit(t.cmd.taskType, key, cancel.signal, onWait)
      .then((permit) => {
        reports?.admitted();
        return permit;
      })
      .finally(() => {
        reports?.stop();
        offStop();
        offDrain?.();
      });
  }

  /**
   * Takes a handler slot (ExecutorOptions.maxConcurrentHandlers; one of `part`'s too, the task's partition's, see
   * {@link HandlerSlots}; `step` one of the two alone): undefined when one was free (no turn, no promise),
   * else a promise that resolves once one is handed over. Throws or rejects, taking none, when the attempts stop
   * (shutdown deadline, revocation, a lost lease: their reason) or, given `draining`, when the consumer drains
   * (ConsumerStoppingError: a handler not started by then does not start, and the message is redelivered), also
   * while waiting in line; once a slot is granted, re-checks the same before the handler runs. A wait in line makes
   * no AbortController and adds no listener of its own (see {@link AbortFanout}).
   */
  private handlerSlot(
    part: Semaphore | undefined,
    stop: AttemptSignals,
    draining: AbortSignal | undefined,
    step: SlotStep = 'both',
  ): Promise<void> | undefined {
    const check = () => {
      if (stop.stopped) throw stop.reason ?? new Error('stopping');
      draining?.throwIfAborted();
    };
    check();
    if (this.handlerSlots.tryAcquire(part, step)) return undefined;
    const wait = this.handlerSlots.enqueue(part, step);
    const offStop = stop.onStop((reason) => wait.cancel(reason));
    const offDrain = draining ? this.aborts.on(draining, () => wait.cancel(draining.reason)) : undefined;
    const done = () => {
      offStop();
      offDrain?.();
    };
    return wait.granted.then(
      () => {
        done();
        try {
          check(); // granted in a turn where the attempts stopped or the drain began
        } catch (e) {
          this.handlerSlots.release(part, step);
          throw e;
        }
      },
      (e: unknown) => {
        done();
        throw e;
      },
    );
  }

  /**
   * Publishes the outcome on task.results. An output over the claim-check threshold is stored as a blob and
   * referenced in `outputRef` (also when a stored result is replayed); one the claim check cannot carry (no store,
   * over KEYFLOW_BLOB_MAX_BYTES) is published as a non-retryable TaskFailed with code PAYLOAD_TOO_LARGE, so the
   * command is answered and its partition goes on. A blob store that does not answer is retried in place.
   */
  private async publish(t: Task, outcome: StoredOutcome, replayed: boolean): Promise<void> {
    const { cmd } = t;
    let checked = { inline: '', ref: null as string | null };
    if (outcome.kind === 'completed' && outcome.outputRef)
      checked = { inline: '', ref: outcome.outputRef }; // stored before its record (see offloaded)
    else if (outcome.kind === 'completed') {
      try {
        checked = await this.o.claimCheck.offload(
          `output of ${cmd.idempotencyKey}`,
          () => payloadBlobKey('results', cmd.runId, cmd.idempotencyKey),
          outcome.output,
          blobRetentionMs(),
        );
      } catch (e) {
        if (!(e instanceof PayloadTooLargeError)) throw e;
        outcome = this.tooLarge(t, e);
      }
    }
    await this.o.results.send(
      this.o.codec.physical(Topic.TASK_RESULTS),
      this.resultMessage(t, outcome, replayed, checked),
    );
  }

  /**
   * The result record of a task (TaskCompleted or TaskFailed on task.results, keyed by run id), its output as the
   * claim check left it (`checked`), carrying the task span's trace context: the engine's next step continues from
   * it. A stable event id per (command, outcome kind): a re-published result is recognisably the same fact.
   */
  private resultMessage(
    t: Task,
    outcome: StoredOutcome,
    replayed: boolean,
    checked: { inline: string; ref: string | null },
  ): Message {
    const { cmd } = t;
    const traceContext = traceContextOf(t.context);
    const meta = newMetadata(outcome.kind === 'completed' ? 'TaskCompleted' : 'TaskFailed', {
      key: cmd.runId,
      correlationId: cmd.metadata.correlationId,
      causationId: cmd.metadata.eventId,
      traceparent: traceContext.traceparent,
      tracestate: traceContext.tracestate,
      eventId: derivedEventId(cmd.metadata.eventId, outcome.kind),
    });
    // The shared fields written out in each: a property added after an object spread is slow on Node 20 (~1.5 µs).
    const value =
      outcome.kind === 'completed'
        ? this.o.codec.encode(Topic.TASK_RESULTS, 'TaskCompleted', {
            metadata: meta,
            runId: cmd.runId,
            stepId: cmd.stepId,
            taskType: cmd.taskType,
            attempt: cmd.attempt,
            idempotencyKey: cmd.idempotencyKey,
            output: checked.inline,
            outputRef: checked.ref,
            durationMs: outcome.durationMs,
            workerId: this.workerId,
            replayed,
          } satisfies TaskCompleted)
        : this.o.codec.encode(Topic.TASK_RESULTS, 'TaskFailed', {
            metadata: meta,
            runId: cmd.runId,
            stepId: cmd.stepId,
            taskType: cmd.taskType,
            attempt: cmd.attempt,
            idempotencyKey: cmd.idempotencyKey,
            error: outcome.error,
            workerId: this.workerId,
          } satisfies TaskFailed);
    // The headers carry the trace context the metadata does (made once: the same injection would give the same text).
    return { key: cmd.runId, value, headers: traceHeaders(traceContext) ?? {} };
  }

  /**
   * A decodable command no handler can take: DLQ record first (the original bytes, for redrive after a fix), then a
   * non-retryable TaskFailed (code DEAD_LETTERED) so the run does not wait for its step timeout. A redriven command
   * that then completes is a late result for the orchestrator; retry the run (POST /runs/:id/retry) to use it.
   */
  private async deadLetterTask(t: Task, err: Error, attempts: number, firstFailureAt: number): Promise<void> {
    await this.deadLetter(t.m, err, attempts, firstFailureAt, t.cmd.taskType, t.log());
    const error = failure(err, false, attempts, firstFailureAt, Date.now(), DEAD_LETTERED);
    await this.publish(t, { kind: 'failed', error }, false);
  }

  private async deadLetter(
    m: ConsumedMessage,
    err: Error,
    attempts: number,
    firstFailureAt: number,
    type: string,
    /** The task's logger when there is a task (its ids on the line), else the worker's. */
    log: Logger = this.o.logger,
  ): Promise<void> {
    await sendToDlq(this.o.producer, m, {
      errorClass: err.name,
      errorMessage: err.message,
      errorCode: failureCode(err, MAX_ERROR_CLASS_CHARS),
      attempts,
      firstFailureAt,
      lastFailureAt: Date.now(),
      consumerGroup: this.o.groupId,
    });
    this.o.metrics.dlq.inc({ type, error_class: err.name });
    log.warn(
      { topic: m.topic, partition: m.partition, offset: m.offset, errorClass: err.name, err: err.message },
      'message sent to the DLQ',
    );
  }

  /** Retries `f` with backoff until it succeeds (Redis outage) or the worker stops. */
  private async untilDone(
    what: string,
    stop: AbortSignal,
    log: () => Logger,
    f: () => Promise<unknown>,
  ): Promise<void> {
    for (let n = 1; ; n++) {
      try {
        await f();
        return;
      } catch (err) {
        if (stop.aborted) throw err;
        const delay = backoffDelayMs(this.policy, Math.min(n, 20));
        log().warn({ err, retryInMs: delay }, `could not ${what}; retrying (the result is kept in memory)`);
        await abortableSleep(delay, stop);
      }
    }
  }
}

/** How a message handed to the executor is answered: its promise's resolve and reject. */
interface Settlement {
  resolve: () => void;
  reject: (e: unknown) => void;
}

/** A message handed to {@link TaskExecutor.handle}, waiting for its wave. */
interface Waiting extends Settlement {
  m: ConsumedMessage;
  hc: HandleContext;
}

/** One command being handled: its message, task span, the span's context and the task's logger. */
interface Task {
  cmd: TaskCommand;
  m: ConsumedMessage;
  hc: HandleContext;
  span: Span;
  context: Context;
  log: () => Logger;
  /** Its message's settlement (see settleTask). */
  waiting: Waiting;
}

/**
 * A task's message handled: its span ends, its message resolves. Never throws (a wave's tasks are settled in one
 * loop: a span that threw must not leave the rest unsettled).
 */
function taskDone(t: Task): void {
  try {
    t.span.end();
  } catch {
    // the span is lost, not the message
  }
  t.waiting.resolve();
}

/**
 * A task's message not handled (retried in place by the ordered consumer): its span ends failed, its message
 * rejects. Never throws (see taskDone).
 */
function failTask(t: Task, e: unknown): void {
  try {
    failSpan(t.span, e);
    t.span.end();
  } catch {
    // the span is lost, not the message
  }
  t.waiting.reject(e);
}

/** Settles a task's message with `done` (see taskDone, failTask). */
function settleTask(t: Task, done: Promise<unknown>): void {
  done.then(
    () => taskDone(t),
    (e: unknown) => failTask(t, e),
  );
}

/** A task whose attempts ended with an outcome to record; its lease is renewed until `unwatch` is called. */
interface Recorded {
  t: Task;
  lease: Lease;
  outcome: StoredOutcome;
  unwatch: () => void;
}

/** Settles a message handed to the executor with `done` (one that never became a task). */
const settle = (to: Settlement, done: Promise<void>): void => void done.then(to.resolve, to.reject);

/** What a task's attempts end with: an outcome to record, or `dlq` (the command goes to the DLQ, nothing recorded). */
type AttemptsOutcome =
  StoredOutcome | { kind: 'dlq'; error: Error; attempts: number; firstFailureAt: number };

/** One answer of the store's beginMany. */
type BeginAnswer = Awaited<ReturnType<IdempotencyStore<StoredOutcome>['beginMany']>>[number];

/**
 * One attempt's handler slot, timer, spans and signal, as its end needs them (see TaskExecutor.runAttempts): one
 * object per attempt where closures would be several.
 */
class Attempt {
  private holding = true;
  /** When the handler was called (ms since epoch); 0 before. */
  started = 0;
  signal?: AttemptSignal;
  counters?: TypeCounters;
  /** When the handler-duration timer started (performance.now(), ms); -1 when it is not running. */
  timerStart = -1;
  attemptSpan = UNRECORDED_SPAN;
  handlerSpan = UNRECORDED_SPAN;

  constructor(
    private readonly slots: HandlerSlots,
    /** The partition's slots the attempt holds one of, when the partitions are bounded. */
    private readonly part: Semaphore | undefined,
    /** Gives the attempt's flow-control permit back, when it holds one. */
    private readonly releasePermit?: () => void,
  ) {}

  /** Gives the handler slot (and flow permit) back (the first call only): the handler's time in ms then, else 0. */
  release(): number {
    if (!this.holding) return 0;
    this.holding = false;
    this.slots.release(this.part);
    this.releasePermit?.();
    return this.started > 0 ? Date.now() - this.started : 0;
  }

  /** Ends the handler-duration timer (the first call once it started): observed in seconds. */
  observe(): void {
    if (this.timerStart < 0) return;
    this.counters!.handlerSeconds.observe((performance.now() - this.timerStart) / 1_000);
    this.timerStart = -1;
  }

  /** The attempt failed with `raw`: its timer ends, its spans are marked failed. */
  failed(raw: unknown): void {
    this.observe();
    failSpan(this.handlerSpan, raw);
    failSpan(this.attemptSpan, raw);
  }

  /** The attempt is over: its signal's timer is cleared and its spans end. */
  dispose(): void {
    this.signal?.dispose();
    this.handlerSpan.end();
    this.attemptSpan.end();
  }
}

/**
 * The TaskContext a handler gets: plain fields, and the parts most handlers never read made on first read, through
 * getters on the prototype (an object literal's getters cost three closures and a slow property definition per
 * call): the attempt's signal (see AttemptSignals.attempt), the task's child logger, and the W3C trace context of
 * the handler's span. Its state is in private fields: `Object.keys`, JSON and a spread see the plain fields only
 * (a spread does not copy the three getters: read them from the context itself).
 */
class AttemptContext implements TaskContext {
  readonly runId: string;
  readonly stepId: string;
  readonly taskType: string;
  readonly stepAttempt: number;
  readonly attempt: number;
  readonly idempotencyKey: string;
  readonly correlationId: string;
  readonly #signals: AttemptSignal;
  readonly #log: () => Logger;
  readonly #handlerContext: Context;

  constructor(
    cmd: TaskCommand,
    attempt: number,
    signals: AttemptSignal,
    log: () => Logger,
    handlerContext: Context,
  ) {
    this.runId = cmd.runId;
    this.stepId = cmd.stepId;
    this.taskType = cmd.taskType;
    this.stepAttempt = cmd.attempt;
    this.attempt = attempt;
    this.idempotencyKey = cmd.idempotencyKey;
    this.correlationId = cmd.metadata.correlationId;
    this.#signals = signals;
    this.#log = log;
    this.#handlerContext = handlerContext;
  }

  get signal(): AbortSignal {
    return this.#signals.signal;
  }

  get logger(): Logger {
    return this.#log();
  }

  get trace(): TraceContext {
    return traceContextOf(this.#handlerContext);
  }
}

/** Labelled metric children of one task type (see TaskExecutor.countersOf). */
interface TypeCounters {
  handlerSeconds: ReturnType<WorkerMetrics['handlerSeconds']['labels']>;
  attemptsOk: ReturnType<WorkerMetrics['attempts']['labels']>;
  completed: ReturnType<WorkerMetrics['tasks']['labels']>;
  /** Successful attempts not yet added to `attemptsOk` and `completed` (see TaskExecutor.flushCounts). */
  unflushedOk: number;
}

/** Stands in for the spans not made for a task that is not recorded (see runAttempts): every call a no-op. */
const UNRECORDED_SPAN: Span = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/** Marks a span failed with `e` (OpenTelemetry: status ERROR and an exception event). */
function failSpan(span: Span, e: unknown): void {
  const err = e instanceof Error ? e : new Error(textOf(e));
  span.recordException(err);
  span.setStatus({ code: SpanStatusCode.ERROR, message: err.message });
}

/** Longest error message a TaskFailed carries, in characters (UTF-16 units; at most 4x as many bytes). */
const MAX_ERROR_MESSAGE_CHARS = 8_000;

/**
 * A handler's output as JSON text (`undefined` as null).
 * @throws OutputNotJsonError when JSON.stringify throws (a circular object, a BigInt) or gives nothing (a function,
 *   a symbol).
 */
function outputJson(result: unknown, idempotencyKey: string): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(result ?? null);
  } catch (e) {
    throw new OutputNotJsonError(`output of ${idempotencyKey} is not JSON: ${(e as Error).message}`);
  }
  if (text === undefined)
    throw new OutputNotJsonError(`output of ${idempotencyKey} is not JSON (a ${typeof result})`);
  return text;
}

/** A TaskFailed error record for `err` (its own `code` unless one is given). */
function failure(
  err: Error,
  retryable: boolean,
  attempts: number,
  firstFailureAt: number,
  lastFailureAt: number,
  code?: string,
): TaskFailed['error'] {
  // What a handler threw may carry anything in name, message and code: the record holds their text, bounded (so a
  // handler's huge error message cannot make the result record too large for its topic).
  const f = toFailure(err, {
    retryable,
    maxNameChars: MAX_ERROR_CLASS_CHARS,
    maxMessageChars: MAX_ERROR_MESSAGE_CHARS,
  });
  return {
    errorClass: f.errorClass,
    message: f.message,
    retryable,
    code: code ?? f.code,
    attempts: Math.max(1, attempts),
    firstFailureAt,
    lastFailureAt,
  };
}

/** Longest error class name and code a TaskFailed carries, in characters (names and codes are short; a bound all the same). */
const MAX_ERROR_CLASS_CHARS = 256;

/**
 * A stored outcome as this version writes it, whatever an earlier version (or another writer) stored: a failure's
 * fields as text (an earlier version kept a numeric code as it was, which TaskFailed cannot carry), a completion
 * without a textual output as the failure OUTPUT_NOT_JSON (its output was something JSON made nothing of). Without
 * this, such a record would be re-published for ever without ever encoding (the key wedged until it expires).
 */
function storedOutcome(raw: StoredOutcome, idempotencyKey: string): StoredOutcome {
  if (raw?.kind === 'completed' && typeof raw.output === 'string')
    return {
      kind: 'completed',
      output: raw.output,
      ...(typeof raw.outputRef === 'string' && raw.outputRef ? { outputRef: raw.outputRef } : {}),
      durationMs: Number(raw.durationMs) || 0,
    };
  const now = Date.now();
  if (raw?.kind !== 'failed' || typeof raw.error !== 'object' || raw.error === null) {
    const err = new OutputNotJsonError(`the stored output of ${idempotencyKey} is not JSON text`);
    return { kind: 'failed', error: failure(err, false, 1, now, now) };
  }
  const e = raw.error as Partial<Record<keyof TaskFailed['error'], unknown>>;
  const stored = Object.assign(new Error(textOf(e.message ?? '')), { name: textOf(e.errorClass ?? 'Error') });
  return {
    kind: 'failed',
    error: failure(
      stored,
      e.retryable === true,
      Number(e.attempts) || 1,
      Number(e.firstFailureAt) || now,
      Number(e.lastFailureAt) || now,
      failureCode(e, MAX_ERROR_CLASS_CHARS) ?? undefined,
    ),
  };
}
