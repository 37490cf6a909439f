import { bootstrapOrchestrator } from '@keyflow/orchestrator';
import { greet, greetAll } from './workflow';

/**
 * 4a. An orchestrator that knows the workflows (and no other: it creates only their task topics): `greet`, and
 * `greet-all`, whose children are `greet` runs (6).
 */
bootstrapOrchestrator([greet, greetAll]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
