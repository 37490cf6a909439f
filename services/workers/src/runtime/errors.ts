/**
 * Errors a task handler throws to say what kind of failure it is. Anything else a handler throws counts as
 * retryable (a transient failure is the safe guess), unless its class is listed in the policy's nonRetryableErrors.
 */
export abstract class TaskError extends Error {
  abstract readonly retryable: boolean;
  /** Machine-readable code, carried in TaskFailed.error.code. */
  readonly code?: string;
  constructor(message: string, opts: { code?: string; cause?: unknown } = {}) {
    super(message, { cause: opts.cause });
    this.name = new.target.name;
    this.code = opts.code;
  }
}

/** Another attempt may succeed (a downstream timeout, a 503). */
export class RetryableTaskError extends TaskError {
  readonly retryable = true;
}

/** No attempt will succeed (a business rule said no): the task fails at once, with one attempt. */
export class NonRetryableTaskError extends TaskError {
  readonly retryable = false;
}

/**
 * The command itself is bad (input that does not parse or validate): no handler can report on it. It goes to the
 * DLQ with triage metadata, to be redriven after a fix.
 */
export class TaskInputError extends TaskError {
  readonly retryable = false;
}

/** An attempt ran past the command's timeoutMs. Retryable. */
export class TaskTimeoutError extends TaskError {
  readonly retryable = true;
}

/** Another worker holds this task's lease right now; the message waits and is retried (never run concurrently). */
export class LeaseHeldError extends Error {
  readonly retryable = true;
  constructor(
    readonly idempotencyKey: string,
    readonly expiresInMs: number,
  ) {
    super(`task ${idempotencyKey} is running elsewhere (lease expires in ${expiresInMs} ms); waiting`);
    this.name = 'LeaseHeldError';
  }
}

/** The worker has no handler for the command's task type. Goes to the DLQ. */
export class UnknownTaskTypeError extends Error {
  readonly retryable = false;
  constructor(readonly taskType: string) {
    super(`no handler for task type ${taskType}`);
    this.name = 'UnknownTaskTypeError';
  }
}

/**
 * The worker lost its idempotency lease while running (a renewal found another holder, a record or a fence on the
 * key): the attempt's signal is aborted, nothing is recorded, and the command is
 * retried in place, where it finds the other holder's outcome or takes the lease again. Retryable.
 */
export class LeaseLostError extends Error {
  readonly retryable = true;
  readonly code = 'LEASE_LOST';
  constructor(
    readonly idempotencyKey: string,
    reason: string,
  ) {
    super(`lease of ${idempotencyKey} lost: ${reason}`);
    this.name = 'LeaseLostError';
  }
}

/** The step's compensation fenced its idempotency key before this command ran: it never runs. Non-retryable. */
export class StepCompensatedError extends Error {
  readonly retryable = false;
  readonly code = 'COMPENSATED';
  constructor(
    readonly idempotencyKey: string,
    readonly by: string,
  ) {
    super(`step ${idempotencyKey} was compensated (by ${by}) before it ran; it is not run`);
    this.name = 'StepCompensatedError';
  }
}
