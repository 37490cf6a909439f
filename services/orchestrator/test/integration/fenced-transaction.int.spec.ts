import { eventually } from '@keyflow/testing';
import { OrchestratorHarness, post } from './support';

jest.setTimeout(120_000);

/**
 * Found by the chaos suite (seed 4 of chaos.int.spec.ts on a 3-broker stack): during a rebalance an instance's
 * partition producer was fenced by the partition's next owner (same transactional id `<group>-p<partition>`; its
 * InitProducerId bumps the epoch). The failed transaction's error (INVALID_PRODUCER_EPOCH, not retriable, then "the
 * producer is disconnecting" for the batch of the other input topic waiting on the same producer) was thrown out of
 * eachBatch; kafkajs crashed the consumer without a restart and the process exited 1. A fenced transaction is aborted
 * and its batch redelivered (nothing was resolved): it must not take the instance down.
 */
describe('an engine transaction fenced by another producer of its partition', () => {
  const h = new OrchestratorHarness('fenced-tx');
  afterAll(async () => {
    if (process.env.KEYFLOW_TEST_DEBUG) h.processes.forEach((p) => console.log(p.logs.join('\n')));
    await h.teardown();
  });

  it('is aborted and its batch redelivered: the instance keeps running and the run completes', async () => {
    const orch = await h.startOrchestrator({ ORCHESTRATOR_PARTITIONS: '1', TASK_PARTITIONS: '1' });
    const url = await orch.ready;
    await h.readEvents();
    await h.simulateWorker(['echo'], (cmd) => ({ output: { echoed: cmd.stepId } }));
    const first = (await post(`${url}/runs`, { workflow: 'three-step', input: {} })).body.runId as string;
    await eventually('the first run completed', () => h.of(first).some((e) => e.event === 'RunCompleted'));

    // Another producer with partition 0's transactional id (kafkajs sends InitProducerId on its first transaction):
    // the instance's producer is now a fenced zombie.
    const intruder = h.ns.kafka.producer({
      transactionalId: `${h.env().ORCHESTRATOR_GROUP_ID}-p0`,
      idempotent: true,
      maxInFlightRequests: 1,
    });
    await intruder.connect();
    await (await intruder.transaction()).abort();
    await intruder.disconnect();

    // One produce request for both input topics of partition 0, so one fetch may hand the engine both batches.
    await h.codec.registerTopics(['wf.requests', 'task.results']);
    const second = `fenced-${h.ns.prefix}`;
    const sender = h.ns.kafka.producer();
    await sender.connect();
    await sender.sendBatch({
      acks: -1,
      topicMessages: [
        {
          topic: h.codec.physical('wf.requests'),
          messages: [
            {
              key: second,
              value: h.startRunValue(second),
            },
          ],
        },
        // Bytes that do not decode: dead-lettered in the engine's transaction, like any input.
        {
          topic: h.codec.physical('task.results'),
          messages: [{ key: first, value: Buffer.from('not avro') }],
        },
      ],
    });
    await sender.disconnect();

    await eventually('the second run completed', () => h.of(second).some((e) => e.event === 'RunCompleted'), {
      timeoutMs: 60_000,
    });
    expect({ exitCode: orch.proc.exitCode, signal: orch.proc.signalCode }).toEqual({
      exitCode: null,
      signal: null,
    });
    expect((await fetch(`${url}/health`)).status).toBe(200);
  });
});
