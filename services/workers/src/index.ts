/**
 * The workers' public API, for an application that runs its own handlers on keyflow (docs/tutorial.md):
 * `KeyflowWorkerModule.forRoot()` in a NestJS application of your own (then `startKeyflowWorker(app)`),
 * or `bootstrapWorker([MyHandlers])` for a process that is only a worker. Handler methods are marked with
 * `@TaskHandler(contract)` from @keyflow/nestjs (typed by the task contract, see `defineTask` in @keyflow/workflow);
 * the error classes say what kind of failure a handler met. A worker runs only the handlers it is given (examples/ holds applications).
 */
export { bootstrapWorker } from './bootstrap';
export {
  KeyflowWorkerModule,
  startKeyflowWorker,
  WORKER_RUNTIME,
  type KeyflowWorkerOptions,
  type KeyflowWorkerAsyncOptions,
  type WorkerRuntime,
} from './module';
export { BLOB_STORE } from './blob-store';
export { loadWorkerConfig, WorkerConfigError, type WorkerConfig } from './config';
export { WorkerSettingsSchema } from './config';
// What a handler's author needs lives in @keyflow/handler (framework-free); re-exported here so applications that
// import it from @keyflow/workers keep working.
export {
  TaskError,
  type TaskErrorCode,
  RetryableTaskError,
  NonRetryableTaskError,
  TaskInputError,
  TaskTimeoutError,
  type TaskContext,
  type ContractHandlerMethod,
} from '@keyflow/handler';
export { EventPublisher } from '@keyflow/task-runtime';
