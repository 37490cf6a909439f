import { orderSaga, type OrderInput } from '@keyflow/example-order-saga';
import { startTrigger, type TriggerRecord } from '@keyflow/workflow';

/** The team's topic the orders come from (its broker name: keyflow's KEYFLOW_TOPIC_PREFIX is not added). */
export const ORDERS_TOPIC = process.env.ORDERS_TOPIC ?? 'orders';

/**
 * A record of the orders topic: JSON (or registry Avro) `{ orderId, amount, failAt? }`, keyed by the order id. Other
 * fields are allowed and not passed on.
 */
interface OrderRecord {
  orderId: string;
  amount: number;
  failAt?: string;
}

/**
 * The run input of one record: the fields the order saga's input schema names. A value that is not an object makes
 * this throw, and the record goes to `trigger.orders.dlq` as TRIGGER_RECORD_UNMAPPABLE; a field of the wrong type
 * (`amount: "12"`) fails the saga's input schema: TRIGGER_INPUT_INVALID.
 */
export function orderInputOf(r: TriggerRecord): OrderInput {
  if (typeof r.value !== 'object' || r.value === null || Array.isArray(r.value))
    throw new Error('the value is not a JSON object');
  const v = r.value as OrderRecord;
  return { orderId: v.orderId, amount: v.amount, failAt: v.failAt };
}

/**
 * One order saga run per record of the orders topic, exactly once per record. `serializeBy: 'key'`: the runs of
 * one order (one record key) never overlap: an order's next record starts its run once the previous run has ended.
 * The run id is the default (`orders:<topic>:<partition>:<offset>`), the business key the record key (the order id).
 * The order saga has no wait step, so there is no signal trigger here (see docs/triggers.md, "Signals").
 */
export const ordersTrigger = startTrigger({
  name: 'orders',
  topic: ORDERS_TOPIC,
  workflow: orderSaga,
  input: orderInputOf,
  serializeBy: 'key',
  maxInFlight: 500,
});
