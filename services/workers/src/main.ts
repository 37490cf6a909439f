import { bootstrapWorker } from './bootstrap';
import { BuiltinHandlers } from './handlers/builtin.handlers';

bootstrapWorker([BuiltinHandlers]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
