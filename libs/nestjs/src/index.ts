/**
 * keyflow for a NestJS application (docs/packages.md): the orchestrator and the worker as modules, and what a
 * handler class needs. Task contracts and workflow definitions come from `@keyflow/workflow` (`defineTask`,
 * `workflow`, `z`).
 *
 * - `KeyflowOrchestratorModule.forRoot({ workflows, schedules })` / `forRootAsync`, then
 *   `setupKeyflowOrchestrator(app)`: the engine, the run API, the ops API and console.
 * - `KeyflowWorkerModule.forRoot()` / `forRootAsync`, then `startKeyflowWorker(app)`: the task transport; handler
 *   classes are controllers of the application's modules whose methods carry `@TaskHandler(contract)`.
 */
export {
  KeyflowOrchestratorModule,
  setupKeyflowOrchestrator,
  ORCHESTRATOR_RUNTIME,
  OrchestratorConfigError,
  type KeyflowOrchestratorOptions,
  type KeyflowOrchestratorAsyncOptions,
  type OrchestratorRuntime,
  type ScheduleDef,
  type CatchUp,
} from '@keyflow/orchestrator';
export {
  KeyflowWorkerModule,
  startKeyflowWorker,
  WORKER_RUNTIME,
  WorkerConfigError,
  EventPublisher,
  BLOB_STORE,
  type KeyflowWorkerOptions,
  type KeyflowWorkerAsyncOptions,
  type WorkerRuntime,
} from '@keyflow/workers';
export { TaskHandler } from './task-handler';
export {
  TaskError,
  RetryableTaskError,
  NonRetryableTaskError,
  TaskInputError,
  TaskTimeoutError,
  type TaskContext,
  type ContractHandlerMethod,
} from '@keyflow/handler';
