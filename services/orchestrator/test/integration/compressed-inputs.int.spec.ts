import { newMetadata } from '@keyflow/contracts';
import type { RunSnapshot } from '@keyflow/schemas';
import { Collector, ensureKcat, eventually, produceWithKcat } from '@keyflow/testing';
import { OrchestratorHarness, post } from './support';

jest.setTimeout(90_000);

/**
 * The engine's inputs (wf.requests, task.results) and the read model's input (wf.state) written by a librdkafka
 * producer (kcat) with zstd, as a Java or Go client with compression.type=zstd writes them: kafkajs alone cannot
 * read zstd (KIP-110) and its consumer crashed.
 */
describe('the orchestrator reading zstd-compressed records', () => {
  const h = new OrchestratorHarness('orch-zstd');
  let kcatMissing: string | undefined;
  let url: string;
  const zstd = (topic: string, key: string, value: Buffer) =>
    produceWithKcat({ brokers: h.ns.infra.kafkaBrokers, topic, codec: 'zstd', records: [{ key, value }] });
  beforeAll(async () => {
    kcatMissing = await ensureKcat().then(
      () => undefined,
      (e: Error) => e.message,
    );
    url = await (await h.startOrchestrator()).ready;
    await h.readEvents();
    await h.codec.registerTopics(['wf.requests', 'wf.state']);
  });
  afterAll(() => h.teardown());

  it('a zstd StartRun on wf.requests and zstd TaskCompleted results run three-step to completion, and a zstd wf.state snapshot is served by the read model', async () => {
    if (kcatMissing) return console.warn(`skipped: ${kcatMissing}`);
    await h.simulateWorker(['echo'], (cmd) => ({ output: { echoed: cmd.stepId } }), { publish: zstd });
    const runId = `zstd-run-${h.ns.prefix}`;
    await zstd(
      h.codec.physical('wf.requests'),
      runId,
      h.codec.encode('wf.requests', 'StartRun', {
        metadata: newMetadata('StartRun', { key: runId, correlationId: runId }),
        runId,
        workflow: 'three-step',
        workflowVersion: null,
        businessKey: runId,
        input: '{}',
        idempotencyKey: null,
        trigger: 'test',
      }),
    );
    await eventually('RunCompleted', () => h.of(runId).some((e) => e.event === 'RunCompleted'));
    expect(
      h
        .of(runId)
        .filter((e) => e.event === 'StepCompleted')
        .map((e) => e.value.stepId),
    ).toEqual(['first', 'second', 'third']);

    // The read model: a snapshot of another run, copied from the engine's own and written with zstd.
    const snapshots = new Collector<RunSnapshot>();
    const reader = h.ns.kafka.consumer({ groupId: h.ns.groupId('state-reader'), maxWaitTimeInMs: 100 });
    await reader.connect();
    await reader.subscribe({ topic: h.codec.physical('wf.state'), fromBeginning: true });
    await reader.run({
      eachMessage: async ({ topic, partition, message }) => {
        if (message.key?.toString() !== runId || !message.value) return;
        const d = await h.codec.decode('wf.state', message.value, {
          topic,
          partition,
          offset: message.offset,
        });
        if (d.event === 'RunSnapshot' && d.value.status === 'completed') snapshots.push(d.value);
      },
    });
    const [original] = await snapshots.wait(1, 30_000);
    await reader.disconnect();
    const copyId = `${runId}-copy`;
    await zstd(
      h.codec.physical('wf.state'),
      copyId,
      h.codec.encode('wf.state', 'RunSnapshot', {
        ...original,
        metadata: newMetadata('RunSnapshot', { key: copyId, correlationId: copyId }),
        runId: copyId,
        state: JSON.stringify({ ...JSON.parse(original.state), runId: copyId }),
      }),
    );
    const served = await eventually(`GET /runs/${copyId}`, async () => {
      const res = await fetch(`${url}/runs/${copyId}`);
      return res.status === 200 ? ((await res.json()) as { runId: string; status: string }) : undefined;
    });
    expect(served).toMatchObject({ runId: copyId, status: 'completed' });
    expect(h.processes.every((p) => p.proc.exitCode === null)).toBe(true);
    // The service still takes new runs through its own (kafkajs) producer.
    expect((await post(`${url}/runs`, { workflow: 'three-step', input: {} })).status).toBe(202);
  });
});
