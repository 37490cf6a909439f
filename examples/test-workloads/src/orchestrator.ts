import { bootstrapOrchestrator, localStep } from '@keyflow/orchestrator';
import { echo, threeStepLocal } from '@keyflow/testing';
import { allWorkflows } from './catalog';

/**
 * An orchestrator with the test workflows and every example's workflow (three-step, fan-out, order-saga,
 * geonames-etl): the process the benchmarks, the end-to-end tests and the scenarios start. It also runs
 * `three-step-local`, whose three `echo` steps are local steps (run here, no worker): bench:orchestrator --local.
 */
bootstrapOrchestrator(
  [...allWorkflows, threeStepLocal],
  process.env,
  [],
  [],
  [localStep(echo, async (input) => input)],
).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
