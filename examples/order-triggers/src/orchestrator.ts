import { bootstrapOrchestrator } from '@keyflow/orchestrator';
import { orderSaga } from '@keyflow/example-order-saga';
import { ordersTrigger } from './triggers';

/**
 * An orchestrator with the order saga and its topic trigger: it reads the orders topic as consumer group
 * `<KEYFLOW_TOPIC_PREFIX>keyflow-trigger-orders` and starts one run per record. Until the topic exists /health is
 * degraded (`trigger:orders`, TRIGGER_SOURCE_MISSING) and the trigger starts once it does.
 */
bootstrapOrchestrator([orderSaga], process.env, [], [ordersTrigger]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
