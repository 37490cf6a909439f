import { bootstrapOrchestrator } from '@keyflow/orchestrator';
import { allWorkflows } from './catalog';

/**
 * An orchestrator with the test workflows and every example's workflow (three-step, fan-out, order-saga,
 * geonames-etl): the process the benchmarks, the end-to-end tests and the scenarios start.
 */
bootstrapOrchestrator([...allWorkflows]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
