import { bootstrapWorker } from '@keyflow/workers';
import { OrderHandlers } from '@keyflow/example-order-saga';
import { EtlHandlers } from '@keyflow/example-geonames-etl';
import { EchoHandlers } from './handlers';

/**
 * A worker with the handlers of the test workloads (`noop`, `echo`) and of every example (order saga, GeoNames ETL):
 * the worker process the orchestrator's integration tests, the benchmarks and the scenarios start.
 */
bootstrapWorker([EchoHandlers, OrderHandlers, EtlHandlers]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
