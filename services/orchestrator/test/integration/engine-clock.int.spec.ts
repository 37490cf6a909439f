import { eventually } from '@keyflow/testing';
import { newMetadata } from '@keyflow/contracts';
import { Topic } from '@keyflow/schemas';
import { rebuildRuns } from '../../src/rebuild';
import { flowLimited, saga } from '../fixtures/test-workflows';
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

describe("the engine's clock and a flow-control wait report", () => {
  const h = new OrchestratorHarness('engine-clock-wait');
  afterAll(() => h.teardown());

  it('a deadline moved by the wait report of a worker whose clock is ahead times out at the moved deadline, and a rebuild from the topics gives the state the engine committed', async () => {
    // The engine moves the deadline at its own clock when it applies the report; a rebuild places a report (it emits
    // no event) at the worker's clock. The TimerFired of the moved deadline must still fire in the rebuild.
    const orch = await h.startOrchestrator({ ORCHESTRATOR_TIMER_TICK_MS: '100' });
    const url = await orch.ready;
    await h.readEvents();
    const reporter = h.ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await reporter.connect();
    const reports: Array<Promise<unknown>> = [];
    // Attempt 1 is never answered: 1 s after its command, its worker reports a wait (stamped 500 ms ahead of the
    // clock); attempt 2 completes.
    await h.simulateWorker(['limited.charge'], (cmd) => {
      if (cmd.attempt > 1) return { output: { charged: true } };
      const report = new Promise((r) => setTimeout(r, 1_000)).then(() =>
        reporter.send({
          topic: h.codec.physical(Topic.TASK_RESULTS),
          acks: -1,
          messages: [
            {
              key: cmd.runId,
              value: h.codec.encode(Topic.TASK_RESULTS, 'TaskWaiting', {
                metadata: newMetadata('TaskWaiting', {
                  key: cmd.runId,
                  correlationId: cmd.runId,
                  causationId: cmd.metadata.eventId,
                  occurredAt: Date.now() + 500,
                }),
                runId: cmd.runId,
                stepId: cmd.stepId,
                taskType: cmd.taskType,
                attempt: cmd.attempt,
                idempotencyKey: cmd.idempotencyKey,
                reason: 'FLOW_LIMIT',
                admitted: false,
                waitedMs: 1_000,
                workerId: 'sim',
              }),
            },
          ],
        }),
      );
      reports.push(report);
      return undefined;
    });
    try {
      const { body } = await post(`${url}/runs`, { workflow: 'flow-limited', input: {} });
      const runId = body.runId as string;
      await eventually('run completed', () => h.of(runId).find((e) => e.event === 'RunCompleted'));
      await Promise.all(reports);
      const events = h.of(runId);
      const at = (e: (typeof events)[number]) =>
        (e.value.metadata as unknown as { occurredAt: number }).occurredAt;
      const [scheduled] = events.filter((e) => e.event === 'StepScheduled');
      const [failed] = events.filter((e) => e.event === 'StepFailed');
      expect(failed.value).toMatchObject({ attempt: 1, error: { errorClass: 'StepTimeoutError' } });
      // Timed out at the moved deadline (about 1 s + 3 s after the dispatch), not the first one (3 s).
      expect(at(failed) - at(scheduled)).toBeGreaterThan(3_500);

      const registry = new WorkflowRegistry().register(flowLimited);
      const report = await rebuildRuns(h.ns.kafka, h.codec, registry);
      expect(report).toMatchObject({ runsLive: 1, runsRebuilt: 1, matching: 1, differences: [] });
    } finally {
      await reporter.disconnect();
    }
  });
});
