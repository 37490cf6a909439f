/**
 * `@keyflow/task-runtime`: what runs a task command, without a framework (docs/architecture/worker.md). The workers
 * service wraps it in its NestJS transport; the orchestrator runs its local steps through the same executor
 * (docs/workflows.md "Local steps"), so both keep one set of idempotency, timeout, retry and DLQ rules.
 */
export {
  EXECUTOR_REDIS_OPTIONS,
  MAX_WAVE_TASKS,
  TaskExecutor,
  type ExecutorOptions,
  type StoredOutcome,
} from './task-executor';
export { workerMetrics, type WorkerMetrics } from './metrics';
export { EventPublisher } from './event-publisher';
export {
  FlowLimiter,
  type FlowLimit,
  type FlowLimits,
  type FlowPermit,
  type FlowLimiterOptions,
} from './flow-limiter';
export { FlowWaitReports, type FlowWaitReportsOptions } from './flow-wait-reports';
export {
  IdempotencyStoreHealth,
  IDEMPOTENCY_STORE_FULL_CONDITION,
  type IdempotencyHealth,
  type EvictionHealth,
} from './idempotency-health';
export { LeaseRenewer } from './lease-renewer';
export { AbortFanout, AttemptSignals, type AttemptSignal } from './attempt-signals';
export { HandlerSlots, type SlotStep } from './handler-slots';
export { decodeTask, taskInput } from './task-decode';
export {
  OutputNotJsonError,
  LeaseHeldError,
  UnknownTaskTypeError,
  LeaseLostError,
  StepCompensatedError,
} from './errors';
