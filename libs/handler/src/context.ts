import type { Logger, TraceContext } from '@keyflow/observability';
import type { AnyTaskContract, ParsedTaskInputOf, TaskOutputOf } from '@keyflow/workflow';

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
  /**
   * The W3C trace context of the handler's span (`traceparent`, `tracestate`; nulls when the run carries no trace):
   * put it on downstream calls (an HTTP `traceparent` header) to continue the run's trace there. Set with or without
   * a trace exporter; without one, a worker does not carry the active context into handlers (docs/operating.md "Tracing"), and
   * for a task not recorded (no exporter, not sampled) it is the task span's, since no handler span is made.
   */
  readonly trace: TraceContext;
}

/** A task handler: input parsed from the command's JSON; the result is serialised to JSON. */
export type TaskHandlerFn = (input: unknown, ctx: TaskContext) => Promise<unknown>;

/**
 * A handler of contract `C`: its parsed input (`ParsedTaskInputOf<C>`, the contract's input schema's output) and
 * the TaskContext in, its output (`TaskOutputOf<C>`, or a promise of it) out. The type `@TaskHandler(contract)`
 * (@keyflow/nestjs) holds a method to; a plain function of this type runs once wrapped by
 * `checkedByContract(contract, handler)`.
 */
export type ContractHandlerMethod<C extends AnyTaskContract> = (
  input: ParsedTaskInputOf<C>,
  ctx: TaskContext,
) => TaskOutputOf<C> | Promise<TaskOutputOf<C>>;
