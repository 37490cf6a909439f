/**
 * The orchestrator's public API, for an application that runs its own workflows on keyflow (docs/tutorial.md):
 * `KeyflowOrchestratorModule.forRoot({ workflows, schedules })` in a NestJS application of your own (with
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
export { OrchestratorConfigError, loadOrchestratorConfig, OrchestratorSettingsSchema } from './config';
export type { ScheduleDef, CatchUp } from './engine/scheduler';
/** The one-shot rebuild check (`keyflow rebuild` in apps/cli): every run rebuilt from the input topics, compared with wf.state. */
export { rebuildRuns, diffRun, type RebuildReport, type Difference } from './rebuild';
export { WorkflowRegistry } from './workflows/registry';
/** Where the orchestrator serves the operator console (its HTTP path). */
export { CONSOLE_PATH } from './api/console';
export { localStep, LocalStepHandlerMissingError, type LocalStepHandler } from './engine/local-steps';
