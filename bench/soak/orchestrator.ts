import { bootstrapOrchestrator } from '@keyflow/orchestrator';
import { soakVersions, soakWorkflow } from './workflows';

/** An orchestrator of the soak (bench/soak.ts): the built-in workflows and `soak` at each of SOAK_VERSIONS. */
bootstrapOrchestrator(soakVersions().map(soakWorkflow)).catch((err) => {
  console.error(err instanceof Error ? err.stack : err);
  process.exit(1);
});
