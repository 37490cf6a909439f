import { bootstrapOrchestrator } from '@keyflow/orchestrator';
import { greet } from './workflow';

/** 4a. An orchestrator that knows the workflow (and no other: it creates only its task topics). */
bootstrapOrchestrator([greet]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
