import { KeyflowError, retryableOf } from '@keyflow/errors';
import { TaskError, type TaskErrorCode } from '@keyflow/handler';

// Errors the worker runtime throws itself (a handler neither throws nor catches them). The task errors a handler
// throws or catches (TaskError and its family) live in @keyflow/handler.

/**
 * A handler returned something JSON cannot hold (a function, a circular object, a BigInt): the step fails with one
 * attempt (another attempt of the same code returns the same kind of value). Code OUTPUT_NOT_JSON.
 */
export class OutputNotJsonError extends TaskError {
  readonly retryable = false;
  static override readonly defaultCode: TaskErrorCode = 'OUTPUT_NOT_JSON';
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
