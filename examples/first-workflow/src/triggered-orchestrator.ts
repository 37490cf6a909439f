import { bootstrapOrchestrator } from '@keyflow/orchestrator';
import { startTrigger } from '@keyflow/workflow';
import { greet } from './workflow';

/**
 * 6. The orchestrator of step 4a with a topic trigger (docs/triggers.md): one `greet` run per record of the topic
 * GREETINGS_TOPIC (default `greetings`; JSON `{ "name": ..., "email": ... }`, the workflow's input). The run id is
 * the default (`greetings:<topic>:<partition>:<offset>`), the business key the record key.
 */
export const greetings = startTrigger({
  name: 'greetings',
  topic: process.env.GREETINGS_TOPIC ?? 'greetings',
  workflow: greet,
});

bootstrapOrchestrator([greet], process.env, [], [greetings]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
