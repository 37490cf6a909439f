import { hostname } from 'node:os';
import type { Producer } from '@keyflow/kafka';
import { blobRetentionMs, PayloadTooLargeError, payloadBlobKey, type ClaimCheck } from '@keyflow/blobs';
import { ContractError, derivedEventId, newMetadata, type EventCodec } from '@keyflow/contracts';
import { ForeignRecordError, type IdempotencyStore } from '@keyflow/idempotency';
import {
  abortableSleep,
  sendToDlq,
  type BatchingProducer,
  type ConsumedMessage,
  type HandleContext,
} from '@keyflow/kafka';
import { context, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import {
  activeContextFollowsCalls,
  contextFromRecord,
  headersWithTrace,
  traceContextOf,
  traceIdsOf,
  tracer,
  type Logger,
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
  StepCompensatedError,
  TaskInputError,
  TaskTimeoutError,
  UnknownTaskTypeError,
} from './errors';
import { AttemptSignals, LeaseRenewer, onAbort } from './lease-renewer';
import type { WorkerMetrics } from './metrics';

/** What a handler gets besides its input. */
export interface TaskContext {
  runId: string;
  stepId: string;
  taskType: string;
  /** The orchestrator's attempt of this step (1-based). */
  stepAttempt: number;
  /** This worker's in-process attempt for this command (1-based). */
  attempt: number;
  /**
   * Names the logical step (`<runId>/<stepId>`): the same for every attempt, redelivery, redrive and run retry of
   * the step. Use it as the dedup key of downstream side effects (a sink's unique key, an API's Idempotency-Key).
   */
  idempotencyKey: string;
  /**
   * Aborted when the attempt times out (timeoutMs), the worker shuts down, the partition is revoked, or the
   * idempotency lease is lost: stop work and side effects when it fires.
   */
  signal: AbortSignal;
  correlationId: string;
  logger: Logger;
}

/** A task handler: input parsed from the command's JSON; the result is serialised to JSON. */
export type TaskHandlerFn = (input: unknown, ctx: TaskContext) => Promise<unknown>;

/** Outcome stored in the completion record, so a redelivery re-publishes it without running the handler. */
export type StoredOutcome =
  { kind: 'completed'; output: string; durationMs: number } | { kind: 'failed'; error: TaskFailed['error'] };

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
  /** Source of randomness for jitter (tests). */
  random?: () => number;
}

const workerId = `${hostname()}/${process.pid}`;

/**
 * Runs one task command end to end: decode, idempotency lease, attempts with timeout and backoff, completion
 * record, result event. Non-decodable commands, unknown task types and bad input go to `<topic>.dlq`.
 *
 * Order of effects, chosen so a crash at any point loses nothing and runs nothing twice that was recorded:
 * handler -> completion record (Redis, written only while the lease is held) -> result event (acks=all) -> offset
 * commit (by the runner). A crash before the record re-runs the handler after the lease expires (side effects must
 * use the idempotency key); after the record, a redelivery re-publishes the stored result with `replayed = true`.
 *
 * One effect per logical step (README "One effect per logical step"): the idempotency key names the step, not the
 * attempt, so a later attempt, a redrive or a run retry finds the earlier one's lease (and waits) or its completion
 * record (and re-publishes it under its own attempt number). A compensation first fences the key of the step it
 * undoes, so a command of that step still queued or redriven later is answered with StepCompensatedError and never
 * runs. A lease renewal that finds another holder aborts the handler's signal; so does a revoked partition. The
 * signal only asks: a handler is never abandoned, and the lease is held until it settles (a handler that ignores
 * its signal delays its key, it never runs twice at once).
 */
export class TaskExecutor {
  private readonly policy: RetryPolicy;
  private readonly renewer: LeaseRenewer;

  constructor(private readonly o: ExecutorOptions) {
    this.policy = retryPolicy(o.retry ?? { initialDelayMs: 100, maxDelayMs: 5_000 });
    this.renewer = new LeaseRenewer(o.store, o.logger);
  }

  /** The metric children of the hot path, per task type (prom-client hashes the labels on every labelled call). */
  private readonly counters = new Map<string, TypeCounters>();

  private countersOf(type: string): TypeCounters {
    let c = this.counters.get(type);
    if (!c) {
      const m = this.o.metrics;
      c = {
        handlerSeconds: m.handlerSeconds.labels({ type }),
        attemptsOk: m.attempts.labels({ type, result: 'ok' }),
        completed: m.tasks.labels({ type, outcome: 'completed' }),
      };
      this.counters.set(type, c);
    }
    return c;
  }

  /** The logical topic of a physical task topic (`<prefix>task.x` -> `task.x`). */
  private logical(topic: string): string {
    return this.o.codec.logical(topic) ?? topic;
  }

  /** Handles one message for the ordered consumer. Rejects only for infrastructure failures (retried in place). */
  async handle(m: ConsumedMessage, hc: HandleContext): Promise<void> {
    const loc = { topic: m.topic, partition: m.partition, offset: m.offset };
    let cmd: TaskCommand;
    try {
      const decoded = await this.o.codec.decode(this.logical(m.topic), m.value, loc);
      cmd = decoded.value as TaskCommand;
    } catch (e) {
      if (e instanceof ContractError && !e.retryable)
        return this.deadLetter(m, e, 1, Date.now(), 'undecodable');
      throw e;
    }
    // The task's span continues the command's trace (its headers, else its metadata); everything below runs in it,
    // so the attempts' and the handler's spans are its children, the result carries its context, and log lines
    // carry its ids. The context is also passed explicitly: where the active context does not follow async calls
    // (the worker without a trace exporter, see startTracing), it is the only way it gets there.
    const parent = contextFromRecord(m.headers, cmd.metadata);
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
    const taskContext = trace.setSpan(parent, span);
    try {
      await context.with(taskContext, () => this.handleCommand(cmd, m, hc, taskContext));
    } catch (e) {
      failSpan(span, e);
      throw e;
    } finally {
      span.end();
    }
  }

  /** The rest of {@link handle}, for a decoded command, inside its task span. */
  private async handleCommand(
    cmd: TaskCommand,
    m: ConsumedMessage,
    hc: HandleContext,
    taskContext: Context,
  ): Promise<void> {
    const loc = { topic: m.topic, partition: m.partition, offset: m.offset };
    // Built on first use: most tasks log nothing, and a pino child serialises its bindings when it is made.
    let child: Logger | undefined;
    const bindings = {
      correlationId: cmd.runId,
      causationId: cmd.metadata.eventId,
      taskType: cmd.taskType,
      stepId: cmd.stepId,
      ...loc,
      // Log lines get the active span's ids from the logger's mixin; without an active context, the task span's.
      ...(activeContextFollowsCalls() ? {} : traceIdsOf(taskContext)),
    };
    const log = (): Logger => (child ??= this.o.logger.child(bindings));
    const handler = this.o.handlers.get(cmd.taskType);
    if (!handler)
      return this.deadLetterCommand(
        cmd,
        m,
        new UnknownTaskTypeError(cmd.taskType),
        1,
        Date.now(),
        taskContext,
      );

    let begin: Awaited<ReturnType<IdempotencyStore<StoredOutcome>['begin']>>;
    try {
      if (cmd.compensates) {
        // Fence the undone step first: after this no command of it runs (a running one finishes first).
        const fence = await this.o.store.fence(cmd.compensates, cmd.idempotencyKey);
        if (fence.state === 'running') throw new LeaseHeldError(cmd.compensates, fence.expiresInMs);
      }
      begin = await this.o.store.begin(cmd.idempotencyKey, cmd.attempt);
    } catch (e) {
      // A value this store did not write sits on the key: no retry fixes that, the command goes to the DLQ.
      if (e instanceof ForeignRecordError)
        return this.deadLetterCommand(cmd, m, e, 0, Date.now(), taskContext);
      throw e;
    }
    if (begin.state === 'fenced') {
      this.o.metrics.fenced.inc({ type: cmd.taskType });
      const err = new StepCompensatedError(cmd.idempotencyKey, begin.by);
      log().warn({ idempotencyKey: cmd.idempotencyKey, by: begin.by }, err.message);
      const now = Date.now();
      return this.publish(
        cmd,
        m,
        { kind: 'failed', error: failure(err, false, 1, now, now) },
        false,
        taskContext,
      );
    }
    if (begin.state === 'completed') {
      this.o.metrics.replayed.inc({ type: cmd.taskType });
      log().info(
        { idempotencyKey: cmd.idempotencyKey },
        'redelivered command already completed: re-publishing the stored result',
      );
      return this.publish(cmd, m, begin.result, true, taskContext);
    }
    if (begin.state === 'running') throw new LeaseHeldError(cmd.idempotencyKey, begin.expiresInMs);

    const lease = begin.lease;
    // Shutdown, revocation (hc.signal) and a lost lease stop the attempts; each attempt has its own signal.
    const stop = new AttemptSignals();
    const unwatch = this.renewer.watch(lease, (reason) => {
      // Counted and logged also after a stop: a handler that ignores its signal may now run beside a new holder.
      this.o.metrics.leaseLost.inc({ type: cmd.taskType });
      log().warn(
        { idempotencyKey: cmd.idempotencyKey, reason },
        'lease lost while running: aborting the handler',
      );
      stop.stop(new LeaseLostError(cmd.idempotencyKey, reason));
    });
    const unlink = onAbort(hc.signal, () => stop.stop(hc.signal.reason));
    let outcome: StoredOutcome | { kind: 'dlq'; error: Error; attempts: number; firstFailureAt: number };
    try {
      outcome = await this.runAttempts(cmd, handler, stop, log, taskContext);
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
      return this.deadLetterCommand(
        cmd,
        m,
        outcome.error,
        outcome.attempts,
        outcome.firstFailureAt,
        taskContext,
      );
    }
    // The lease stays renewed until the record is written (a Redis outage must not let it lapse into a re-run),
    // and a revoked partition does not stop the write: the step ran, its record must exist for the new owner.
    let held = true;
    try {
      await this.untilDone('store the completion record', hc.shutdown, log, async () => {
        held = await this.o.store.complete(lease, outcome as StoredOutcome, outcome.kind === 'completed');
      });
    } finally {
      unwatch();
    }
    if (!held) {
      // Someone else may hold the step now: publish nothing of ours; the in-place retry finds its outcome.
      this.o.metrics.leaseLost.inc({ type: cmd.taskType });
      throw new LeaseLostError(cmd.idempotencyKey, 'another holder took it before the record was written');
    }
    return this.publish(cmd, m, outcome, false, taskContext);
  }

  private async runAttempts(
    cmd: TaskCommand,
    handler: TaskHandlerFn,
    stop: AttemptSignals,
    log: () => Logger,
    taskContext: Context,
  ) {
    const input = await this.parseInput(cmd);
    if (input instanceof Error)
      return { kind: 'dlq' as const, error: input, attempts: 0, firstFailureAt: Date.now() };
    const maxAttempts = Math.max(1, cmd.maxAttempts);
    const started = Date.now();
    let firstFailureAt = 0;
    for (let attempt = 1; ; attempt++) {
      if (stop.stopped) throw stop.reason ?? new Error('stopping');
      const attemptSignal = stop.attempt(
        cmd.timeoutMs,
        () => new TaskTimeoutError(`attempt ${attempt} exceeded ${cmd.timeoutMs} ms`),
      );
      const counters = this.countersOf(cmd.taskType);
      const end = counters.handlerSeconds.startTimer();
      const attemptSpan = tracer().startSpan(
        'keyflow.task.attempt',
        { attributes: { 'keyflow.attempt': attempt, 'keyflow.timeout_ms': cmd.timeoutMs } },
        taskContext,
      );
      const attemptContext = trace.setSpan(taskContext, attemptSpan);
      const handlerSpan = tracer().startSpan(`keyflow.handler ${cmd.taskType}`, {}, attemptContext);
      try {
        // The handler is never abandoned: its signal asks it to stop (timeout, shutdown, revocation, lost lease), and
        // the lease is held until it has settled, so no other attempt or worker runs the step meanwhile. A handler
        // that ignores its signal and succeeds anyway has had its effect: its result is recorded and published.
        const result = await context.with(trace.setSpan(attemptContext, handlerSpan), () =>
          handler(input, {
            runId: cmd.runId,
            stepId: cmd.stepId,
            taskType: cmd.taskType,
            stepAttempt: cmd.attempt,
            attempt,
            idempotencyKey: cmd.idempotencyKey,
            // Made when the handler first reads it (most never do): see AttemptSignals.attempt.
            get signal() {
              return attemptSignal.signal;
            },
            correlationId: cmd.metadata.correlationId,
            // The task's child logger, made when the handler first reads it.
            get logger() {
              return log();
            },
          }),
        );
        end();
        counters.attemptsOk.inc();
        counters.completed.inc();
        return {
          kind: 'completed' as const,
          output: JSON.stringify(result ?? null),
          durationMs: Date.now() - started,
        };
      } catch (raw) {
        end();
        failSpan(handlerSpan, raw);
        failSpan(attemptSpan, raw);
        if (stop.stopped) throw stop.reason ?? raw;
        const err = raw instanceof Error ? raw : new Error(String(raw));
        const now = Date.now();
        firstFailureAt ||= now;
        this.o.metrics.attempts.inc({ type: cmd.taskType, result: err.name });
        if (err instanceof TaskInputError)
          return { kind: 'dlq' as const, error: err, attempts: attempt, firstFailureAt };
        const retryable = (err as { retryable?: boolean }).retryable !== false;
        const policy = { ...this.policy, maxAttempts };
        if (shouldRetry(policy, attempt, err.name, retryable)) {
          const delay = backoffDelayMs(policy, attempt, this.o.random);
          this.o.metrics.retries.inc({ type: cmd.taskType });
          log().warn(
            { attempt, maxAttempts, errorClass: err.name, err: err.message, retryInMs: delay },
            'task attempt failed; retrying',
          );
          await abortableSleep(delay, stop.next().signal);
          continue;
        }
        this.o.metrics.tasks.inc({ type: cmd.taskType, outcome: 'failed' });
        log().warn({ attempt, errorClass: err.name, err: err.message, retryable }, 'task failed for good');
        return {
          kind: 'failed' as const,
          error: failure(err, retryable, attempt, firstFailureAt, now),
        };
      } finally {
        attemptSignal.dispose();
        handlerSpan.end();
        attemptSpan.end();
      }
    }
  }

  /** The command's input: inline JSON, or the blob its inputRef names (claim check). */
  private async parseInput(cmd: TaskCommand): Promise<unknown> {
    let text: string;
    try {
      text = await this.o.claimCheck.resolve(cmd.input, cmd.inputRef);
    } catch (e) {
      if ((e as { retryable?: boolean }).retryable === false)
        return new TaskInputError(`input of ${cmd.idempotencyKey}: ${(e as Error).message}`, { cause: e });
      throw e;
    }
    try {
      return JSON.parse(text);
    } catch (e) {
      // Not the parser's message: it quotes the text around the fault, which may be personal data.
      return new TaskInputError(`input of ${cmd.idempotencyKey} is not JSON (${(e as Error).name})`);
    }
  }

  /**
   * Publishes the outcome on task.results. An output over the claim-check threshold is stored as a blob and
   * referenced in `outputRef` (also when a stored result is replayed); one the claim check cannot carry (no store,
   * over KEYFLOW_BLOB_MAX_BYTES) is published as a non-retryable TaskFailed with code PAYLOAD_TOO_LARGE, so the
   * command is answered and its partition goes on. A blob store that does not answer is retried in place.
   */
  private async publish(
    cmd: TaskCommand,
    m: ConsumedMessage,
    outcome: StoredOutcome,
    replayed: boolean,
    taskContext: Context,
  ): Promise<void> {
    let checked = { inline: '', ref: null as string | null };
    if (outcome.kind === 'completed') {
      try {
        checked = await this.o.claimCheck.offload(
          `output of ${cmd.idempotencyKey}`,
          () => payloadBlobKey('results', cmd.runId, cmd.idempotencyKey),
          outcome.output,
          blobRetentionMs(),
        );
      } catch (e) {
        if (!(e instanceof PayloadTooLargeError)) throw e;
        this.o.metrics.tasks.inc({ type: cmd.taskType, outcome: 'too_large' });
        this.o.logger.warn(
          { idempotencyKey: cmd.idempotencyKey, code: e.code, err: e.message },
          'output too large for its topic and the claim check: the step fails',
        );
        const now = Date.now();
        outcome = { kind: 'failed', error: failure(e, false, 1, now, now) };
      }
    }
    // The task span's context: the engine's next step continues from it.
    const traceContext = traceContextOf(taskContext);
    // A stable event id per (command, outcome kind): a re-published result is recognisably the same fact.
    const meta = newMetadata(outcome.kind === 'completed' ? 'TaskCompleted' : 'TaskFailed', {
      key: cmd.runId,
      correlationId: cmd.metadata.correlationId,
      causationId: cmd.metadata.eventId,
      traceparent: traceContext.traceparent,
      tracestate: traceContext.tracestate,
      eventId: derivedEventId(cmd.metadata.eventId, outcome.kind),
    });
    const common = {
      runId: cmd.runId,
      stepId: cmd.stepId,
      taskType: cmd.taskType,
      attempt: cmd.attempt,
      idempotencyKey: cmd.idempotencyKey,
    };
    const value =
      outcome.kind === 'completed'
        ? this.o.codec.encode('task.results', 'TaskCompleted', {
            metadata: meta,
            ...common,
            output: checked.inline,
            outputRef: checked.ref,
            durationMs: outcome.durationMs,
            workerId,
            replayed,
          } satisfies TaskCompleted)
        : this.o.codec.encode('task.results', 'TaskFailed', {
            metadata: meta,
            ...common,
            error: outcome.error,
            workerId,
          } satisfies TaskFailed);
    await this.o.results.send(this.o.codec.physical('task.results'), {
      key: cmd.runId,
      value,
      headers: headersWithTrace({}, taskContext),
    });
  }

  /**
   * A decodable command no handler can take: DLQ record first (the original bytes, for redrive after a fix), then a
   * non-retryable TaskFailed (code DEAD_LETTERED) so the run does not wait for its step timeout. A redriven command
   * that then completes is a late result for the orchestrator; retry the run (POST /runs/:id/retry) to use it.
   */
  private async deadLetterCommand(
    cmd: TaskCommand,
    m: ConsumedMessage,
    err: Error,
    attempts: number,
    firstFailureAt: number,
    taskContext: Context,
  ): Promise<void> {
    await this.deadLetter(m, err, attempts, firstFailureAt, cmd.taskType);
    const error = failure(err, false, attempts, firstFailureAt, Date.now(), DEAD_LETTERED);
    await this.publish(cmd, m, { kind: 'failed', error }, false, taskContext);
  }

  private async deadLetter(
    m: ConsumedMessage,
    err: Error,
    attempts: number,
    firstFailureAt: number,
    type: string,
  ): Promise<void> {
    await sendToDlq(this.o.producer, m, {
      errorClass: err.name,
      errorMessage: err.message,
      errorCode: codeOf(err),
      attempts,
      firstFailureAt,
      lastFailureAt: Date.now(),
      consumerGroup: this.o.groupId,
    });
    this.o.metrics.dlq.inc({ type, error_class: err.name });
    this.o.logger.warn(
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

/** Labelled metric children of one task type (see TaskExecutor.countersOf). */
interface TypeCounters {
  handlerSeconds: ReturnType<WorkerMetrics['handlerSeconds']['labels']>;
  attemptsOk: ReturnType<WorkerMetrics['attempts']['labels']>;
  completed: ReturnType<WorkerMetrics['tasks']['labels']>;
}

/** Marks a span failed with `e` (OpenTelemetry: status ERROR and an exception event). */
function failSpan(span: Span, e: unknown): void {
  const err = e instanceof Error ? e : new Error(String(e));
  span.recordException(err);
  span.setStatus({ code: SpanStatusCode.ERROR, message: err.message });
}

/** Longest error message a TaskFailed carries, in characters (UTF-16 units; at most 4x as many bytes). */
const MAX_ERROR_MESSAGE_CHARS = 8_000;

/** A TaskFailed error record for `err` (its own `code` unless one is given). */
function failure(
  err: Error,
  retryable: boolean,
  attempts: number,
  firstFailureAt: number,
  lastFailureAt: number,
  code?: string,
): TaskFailed['error'] {
  return {
    errorClass: err.name,
    // Bounded, so a handler's huge error message cannot make the result record too large for its topic.
    message:
      err.message.length > MAX_ERROR_MESSAGE_CHARS
        ? `${err.message.slice(0, MAX_ERROR_MESSAGE_CHARS)}…`
        : err.message,
    retryable,
    code: code ?? (err as { code?: string }).code ?? null,
    attempts: Math.max(1, attempts),
    firstFailureAt,
    lastFailureAt,
  };
}

/** An error's machine-readable `code`, when it carries a string one (TaskError, ContractError, EtlError). */
function codeOf(err: Error): string | null {
  const code: unknown = (err as Error & { code?: unknown }).code;
  return typeof code === 'string' ? code : null;
}
