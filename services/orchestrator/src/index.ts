/**
 * The orchestrator's public API, for an application that runs its own workflows on keyflow (README "Your first
 * workflow"): `bootstrapOrchestrator([myWorkflow], process.env, schedules)` starts an orchestrator instance with
 * the built-in workflows and these. `src/main.ts` is the built-in orchestrator.
 */
export { bootstrapOrchestrator } from './bootstrap';
export type { ScheduleDef, CatchUp } from './engine/scheduler';
