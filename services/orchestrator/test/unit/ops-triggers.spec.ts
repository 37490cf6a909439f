import 'reflect-metadata';
import { EventCodec } from '@keyflow/contracts';
import { OpsController } from '../../src/api/ops.controller';
import { OpsService } from '../../src/api/ops.service';
import type { TriggerStatus, TriggerStatusSource } from '../../src/triggers/status';

const PREFIX = 'team-a.';

/** A trigger's status as a runner reports it: one assigned partition behind, one paused for backpressure. */
const orders: TriggerStatus = {
  name: 'orders',
  kind: 'start',
  topic: 'orders',
  group: `${PREFIX}keyflow-trigger-orders`,
  target: 'order-saga',
  inFlight: 7,
  maxInFlight: 10,
  held: 2,
  paused: true,
  lag: 42,
  partitions: [
    { topic: 'orders', partition: 0, lag: 40, position: '1200', paused: true, held: 2 },
    { topic: 'orders', partition: 1, lag: 2, position: '17', paused: false, held: 0 },
  ],
  dlq: `${PREFIX}trigger.orders.dlq`,
  counts: { applied: 1217, deadLettered: 3, skippedReplay: 0 },
};

/** The ops API over a status source; the lag monitor, read model, Kafka and the rest are not used by the route. */
function opsApi(source?: TriggerStatusSource): OpsController {
  const unused = {} as never;
  // The codec only names topics here (logical <-> physical): no registry call is made.
  const codec = new EventCodec({ registryUrl: 'http://127.0.0.1:1', topicPrefix: PREFIX });
  return new OpsController(
    new OpsService(unused, codec, unused, unused, unused, unused, unused, unused, undefined, source),
  );
}

describe('GET /ops/triggers (the ops API over the trigger runners)', () => {
  it('answers each trigger status as the runners report it, with its DLQ also by the logical name the DLQ routes take', async () => {
    const answer = await opsApi({ status: () => [orders] }).triggers();
    expect(answer).toEqual({ triggers: [{ ...orders, dlqLogical: 'trigger.orders.dlq' }] });
  });

  it('reads the runners at each request, so the figures are the current ones', async () => {
    let inFlight = 1;
    const api = opsApi({ status: () => [{ ...orders, inFlight: inFlight++ }] });
    expect((await api.triggers()).triggers[0].inFlight).toBe(1);
    expect((await api.triggers()).triggers[0].inFlight).toBe(2);
  });

  it('a DLQ outside the deployment topic prefix has no logical name (null), its physical name still shown', async () => {
    const answer = await opsApi({ status: () => [{ ...orders, dlq: 'elsewhere.orders.dlq' }] }).triggers();
    expect(answer.triggers[0]).toMatchObject({ dlq: 'elsewhere.orders.dlq', dlqLogical: null });
  });

  it('answers an empty list on an instance without triggers (no status source given)', async () => {
    expect(await opsApi().triggers()).toEqual({ triggers: [] });
    expect(await opsApi({ status: () => [] }).triggers()).toEqual({ triggers: [] });
  });
});
