import { bootstrapWorker } from '@keyflow/workers';
import { GreetingHandlers } from './handlers';

/** 4b. A worker running the handlers (it consumes task.tutorial.compose-greeting and task.tutorial.send-greeting). */
bootstrapWorker([GreetingHandlers]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
