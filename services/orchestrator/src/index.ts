/**
 * The orchestrator's public API, for an application that runs its own workflows on keyflow (README "Your first
 * workflow"): `KeyflowOrchestratorModule.forRoot({ workflows, schedules })` in a NestJS application of your own (with
 * `setupKeyflowOrchestrator(app)`), or `bootstrapOrchestrator([myWorkflow], process.env, schedules)` for a process
 * that is only an orchestrator (these workflows and no others: examples/ holds applications built this way).
 */
export { bootstrapOrchestrator } from './bootstrap';
export {
  KeyflowOrchestratorModule,
  setupKeyflowOrchestrator,
  ORCHESTRATOR_RUNTIME,
  type KeyflowOrchestratorOptions,
  type KeyflowOrchestratorAsyncOptions,
} from './module';
export type { OrchestratorRuntime } from './runtime';
export { OrchestratorConfigError } from './config';
export type { ScheduleDef, CatchUp } from './engine/scheduler';
export { CONSOLE_PATH } from './api/console';
