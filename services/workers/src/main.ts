import { bootstrapWorker } from './bootstrap';
import { BuiltinHandlers } from './handlers/builtin.handlers';
import { OrderHandlers } from './handlers/order.handlers';
import { EtlHandlers } from './handlers/etl.handlers';

bootstrapWorker([BuiltinHandlers, OrderHandlers, EtlHandlers]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
