import { bootstrapWorker } from '@keyflow/workers';
import { EtlHandlers } from './handlers';

/** The GeoNames example's worker: the ETL's handlers (task.etl.extract, .transform, .dedupe, .load, .report). */
bootstrapWorker([EtlHandlers]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
