import { eventually } from '@keyflow/testing';
import { rebuildRuns } from '../../src/rebuild';
import { saga } from '../fixtures/test-workflows';
import { WorkflowRegistry } from '../../src/workflows/registry';
import { OrchestratorHarness, post } from './support';

jest.setTimeout(120_000);

/**
 * Step deadlines run on the engine's own clock (issue "Scale-out", item 3): a result stamped by a worker whose
 * clock is an hour behind (or delivered after an hour of engine lag) must not make the next step's timeout
 * already due when its command is published.
 */
describe("the engine's clock", () => {
  const h = new OrchestratorHarness('engine-clock');
  afterAll(() => h.teardown());

  it('a result from a worker whose clock is an hour behind causes no spurious step timeout or second attempt', async () => {
    const orch = await h.startOrchestrator({ ORCHESTRATOR_TIMER_TICK_MS: '100' });
    const url = await orch.ready;
    await h.readEvents();
    await h.simulateWorker(['saga.reserve', 'saga.charge', 'saga.ship'], () => ({ output: { ok: true } }), {
      clockSkewMs: -3_600_000,
      delayMs: 1_000, // longer than a timer tick: a deadline already due would fire first
    });
    const { body } = await post(`${url}/runs`, { workflow: 'saga', input: {} });
    const runId = body.runId as string;
    await eventually('run completed', () => h.of(runId).find((e) => e.event === 'RunCompleted'));
    const events = h.of(runId);
    expect(events.filter((e) => e.event === 'StepFailed')).toEqual([]);
    expect(
      events.filter((e) => e.event === 'StepScheduled').map((e) => [e.value.stepId, e.value.attempt]),
    ).toEqual([
      ['reserve', 1],
      ['charge', 1],
      ['ship', 1],
    ]);

    // Rebuild replays the inputs in the engine's order and at its times (from wf.events), not by the skewed
    // producer clock, which would put the results before the run's start.
    const registry = new WorkflowRegistry().register(saga);
    const report = await rebuildRuns(h.ns.kafka, h.codec, registry);
    expect(report).toMatchObject({ runsLive: 1, runsRebuilt: 1, matching: 1, differences: [] });
  });
});
