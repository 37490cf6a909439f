import { bootstrapWorker } from '@keyflow/workers';
import { OrderHandlers } from '@keyflow/example-order-saga';

/** A worker running the order saga's handlers (reserve, charge, ship, confirm and their compensations). */
bootstrapWorker([OrderHandlers]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
