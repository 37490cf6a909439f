import { eventually } from '@keyflow/testing';
import { distinctEvents, OrchestratorHarness, post, type ServiceProcess } from './support';

jest.setTimeout(120_000);

/**
 * Ended runs are kept ORCHESTRATOR_RUN_RETENTION_MS after they end, then forgotten: a tombstone on wf.state (so
 * compaction removes the key) and every instance drops them, so the orchestrator's memory does not grow with every
 * run ever started. A run that has not ended is never forgotten.
 */
describe('run retention', () => {
  let h: OrchestratorHarness;
  let orch: ServiceProcess;

  beforeAll(async () => {
    h = new OrchestratorHarness('retention');
    orch = await h.startOrchestrator({
      ORCHESTRATOR_RUN_RETENTION_MS: '1500',
      ORCHESTRATOR_RETENTION_SWEEP_MS: '200',
    });
    // Only `echo`: three-step completes, order-saga waits at its first step.
    await h.startWorker({ WORKER_TASK_TYPES: 'echo' });
    await h.readEvents();
  });
  afterAll(() => h?.teardown());

  it('an ended run is forgotten after its retention (tombstone on wf.state, 404); a running run is kept', async () => {
    const url = await orch.ready;
    const ended = await post(`${url}/runs`, { workflow: 'three-step', input: {} });
    const running = await post(`${url}/runs`, { workflow: 'order-saga', input: {} });
    expect([ended.status, running.status]).toEqual([202, 202]);
    const endedId = ended.body.runId as string;
    const runningId = running.body.runId as string;

    await eventually(
      'the three-step run completed',
      () => distinctEvents(h.events).some((e) => e.event === 'RunCompleted' && e.value.runId === endedId),
      { timeoutMs: 60_000 },
    );
    await eventually(
      'the ended run is forgotten: 404',
      async () => (await fetch(`${url}/runs/${endedId}`)).status,
      { until: (s) => s === 404, timeoutMs: 30_000, intervalMs: 200 },
    );
    const kept = await fetch(`${url}/runs/${runningId}`);
    expect(kept.status).toBe(200);
    expect(((await kept.json()) as { status: string }).status).toBe('running');

    // What the topic holds: the ended run's last record on wf.state is a tombstone; the running run has none.
    const last = new Map<string, Buffer | null>();
    const reader = h.ns.kafka.consumer({ groupId: h.ns.groupId('state-reader'), readUncommitted: false });
    await reader.connect();
    await reader.subscribe({ topic: h.codec.physical('wf.state'), fromBeginning: true });
    await reader.run({
      eachMessage: async ({ message }) => void last.set(String(message.key), message.value),
    });
    try {
      await eventually('the tombstone is read', () => last.has(endedId) && last.get(endedId) === null, {
        timeoutMs: 30_000,
      });
    } finally {
      await reader.disconnect();
    }
    expect(last.get(runningId)).not.toBeNull();
    expect(last.get(runningId)).toBeDefined();
  });
});
