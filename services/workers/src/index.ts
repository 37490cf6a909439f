/**
 * The workers' public API, for an application that runs its own handlers on keyflow (README "Your first
 * workflow"): `bootstrapWorker([MyHandlers])` starts a worker process with them; `@TaskHandler(contract)` marks a
 * handler method (typed by the task contract, see `defineTask` in @keyflow/workflow); the error classes say what
 * kind of failure a handler met. `src/main.ts` is the built-in worker (the built-in handlers).
 */
export { bootstrapWorker } from './bootstrap';
export { TaskHandler, type ContractHandlerMethod } from './transport/task-handler.decorator';
export type { TaskContext } from './runtime/task-executor';
export {
  TaskError,
  RetryableTaskError,
  NonRetryableTaskError,
  TaskInputError,
  TaskTimeoutError,
} from './runtime/errors';
export { EventPublisher } from './runtime/event-publisher';
