import { eventually } from '@keyflow/testing';
import { distinctEvents, OrchestratorHarness, post, type ServiceProcess } from './support';

jest.setTimeout(120_000);

/**
 * docs/guarantees/deploys-and-client-retries.md, "How long keys live": a start's Idempotency-Key lives at least the
 * run retention, and the same request again gets the same run. A run ends and is forgotten after
 * ORCHESTRATOR_RUN_RETENTION_MS while its key still lives (IDEMPOTENCY_KEY_TTL_MS, 24 h by default, is longer than a
 * retention of an hour, and a key counts from the start, a retention from the end): a client's retry of that start
 * then must get its run again, not a second execution of the workflow under the same run id.
 */
describe('a keyed start retried after its run was forgotten', () => {
  let h: OrchestratorHarness;
  let orch: ServiceProcess;

  beforeAll(async () => {
    h = new OrchestratorHarness('keyed-start-forgotten');
    orch = await h.startOrchestrator({
      ORCHESTRATOR_RUN_RETENTION_MS: '1500',
      ORCHESTRATOR_RETENTION_SWEEP_MS: '200',
    });
    await h.startWorker({ WORKER_TASK_TYPES: 'echo' });
    await h.readEvents();
  });
  afterAll(() => h?.teardown());

  it('is answered with the same run and starts nothing again', async () => {
    const url = await orch.ready;
    const start = () =>
      post(`${url}/runs`, { workflow: 'three-step', input: {} }, { 'Idempotency-Key': 'order-42' });
    const first = await start();
    expect(first.status).toBe(202);
    const runId = first.body.runId as string;
    const completed = (id: string) =>
      distinctEvents(h.events).some((e) => e.event === 'RunCompleted' && e.value.runId === id);
    await eventually('the run completed', () => completed(runId), { timeoutMs: 60_000 });
    await eventually(
      'the ended run is forgotten: 404',
      async () => (await fetch(`${url}/runs/${runId}`)).status,
      {
        until: (s) => s === 404,
        timeoutMs: 30_000,
        intervalMs: 200,
      },
    );

    // The client did not see the first answer and retries, with its key.
    const again = await start();
    expect(again.status).toBe(202);
    expect(again.body.runId).toBe(runId);

    // A run started after the retry completes: by then a StartRun the retry sent has long been applied.
    const later = await post(`${url}/runs`, { workflow: 'three-step', input: {} });
    await eventually('a later run completed', () => completed(later.body.runId as string), {
      timeoutMs: 60_000,
    });
    const started = distinctEvents(h.events).filter(
      (e) => e.event === 'RunStarted' && e.value.runId === runId,
    );
    expect(started).toHaveLength(1);
  });
});
