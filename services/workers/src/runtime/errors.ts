import { type ErrorCode, KeyflowError, retryableOf } from '@keyflow/errors';

/**
 * The code of a task error: one of keyflow's (the class defaults, INPUT_SCHEMA, ...) or the handler's own (an
 * application's code, e.g. DECLINED): TaskFailed.error.code and x-dlq-error-code carry it as it is.
 */
export type TaskErrorCode = ErrorCode | (string & NonNullable<unknown>);
/**
 * Errors a task handler throws to say what kind of failure it is. Anything else a handler throws counts as
 * retryable (a transient failure is the safe guess), unless its class is listed in the policy's nonRetryableErrors.
 */
export abstract class TaskError extends KeyflowError<TaskErrorCode> {
  /** The code when the thrower gives none (each class has its own; a subclass may set another). */
  static readonly defaultCode: TaskErrorCode = 'TASK_ERROR';
  /** Machine-readable code, carried in TaskFailed.error.code: the handler's, else the class's default. */
  readonly code: TaskErrorCode;
  constructor(message: string, opts: { code?: TaskErrorCode; cause?: unknown } = {}) {
    super(message, { cause: opts.cause });
    this.code = opts.code ?? (new.target as unknown as typeof TaskError).defaultCode;
  }
}

/** Another attempt may succeed (a downstream timeout, a 503). Default code TASK_RETRYABLE. */
export class RetryableTaskError extends TaskError {
  readonly retryable = true;
  static override readonly defaultCode: TaskErrorCode = 'TASK_RETRYABLE';
}

/** No attempt will succeed (a business rule said no): the task fails at once, with one attempt. Default code TASK_FAILED. */
export class NonRetryableTaskError extends TaskError {
  readonly retryable = false;
  static override readonly defaultCode: TaskErrorCode = 'TASK_FAILED';
}

/**
 * The command itself is bad (input that does not parse or validate): no handler can report on it. It goes to the
 * DLQ with triage metadata, to be redriven after a fix. Default code TASK_INPUT (INPUT_SCHEMA: its contract refused it).
 */
export class TaskInputError extends TaskError {
  readonly retryable = false;
  static override readonly defaultCode: TaskErrorCode = 'TASK_INPUT';
}

/**
 * A handler returned something JSON cannot hold (a function, a circular object, a BigInt): the step fails with one
 * attempt (another attempt of the same code returns the same kind of value). Code OUTPUT_NOT_JSON.
 */
export class OutputNotJsonError extends TaskError {
  readonly retryable = false;
  static override readonly defaultCode: TaskErrorCode = 'OUTPUT_NOT_JSON';
}

/** An attempt ran past the command's timeoutMs. Retryable. Code TASK_TIMEOUT. */
export class TaskTimeoutError extends TaskError {
  readonly retryable = true;
  static override readonly defaultCode: TaskErrorCode = 'TASK_TIMEOUT';
}

/** Another worker holds this task's lease right now; the message waits and is retried (never run concurrently). */
export class LeaseHeldError extends KeyflowError {
  readonly code = 'LEASE_HELD';
  readonly retryable = retryableOf('LEASE_HELD');
  constructor(
    readonly idempotencyKey: string,
    readonly expiresInMs: number,
  ) {
    super(`task ${idempotencyKey} is running elsewhere (lease expires in ${expiresInMs} ms); waiting`);
  }
}

/** The worker has no handler for the command's task type. Goes to the DLQ. */
export class UnknownTaskTypeError extends KeyflowError {
  readonly code = 'UNKNOWN_TASK_TYPE';
  readonly retryable = retryableOf('UNKNOWN_TASK_TYPE');
  constructor(readonly taskType: string) {
    super(`no handler for task type ${taskType}`);
  }
}

/**
 * The worker lost its idempotency lease while running (a renewal found another holder, a record or a fence on the
 * key): the attempt's signal is aborted, nothing is recorded, and the command is
 * retried in place, where it finds the other holder's outcome or takes the lease again. Retryable.
 */
export class LeaseLostError extends KeyflowError {
  readonly retryable = retryableOf('LEASE_LOST');
  readonly code = 'LEASE_LOST';
  constructor(
    readonly idempotencyKey: string,
    reason: string,
  ) {
    super(`lease of ${idempotencyKey} lost: ${reason}`);
  }
}

/** The step's compensation fenced its idempotency key before this command ran: it never runs. Non-retryable. */
export class StepCompensatedError extends KeyflowError {
  readonly retryable = retryableOf('COMPENSATED');
  readonly code = 'COMPENSATED';
  constructor(
    readonly idempotencyKey: string,
    readonly by: string,
  ) {
    super(`step ${idempotencyKey} was compensated (by ${by}) before it ran; it is not run`);
  }
}
