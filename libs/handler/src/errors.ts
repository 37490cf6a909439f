import { type ErrorCode, KeyflowError } from '@keyflow/errors';

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

/** An attempt ran past the command's timeoutMs. Retryable. Code TASK_TIMEOUT. */
export class TaskTimeoutError extends TaskError {
  readonly retryable = true;
  static override readonly defaultCode: TaskErrorCode = 'TASK_TIMEOUT';
}
