import { bootstrapWorker } from './bootstrap';
import { BuiltinHandlers } from './handlers/builtin.handlers';
import { OrderHandlers } from './handlers/order.handlers';

bootstrapWorker([BuiltinHandlers, OrderHandlers]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
