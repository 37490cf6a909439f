import { Collector, eventually, testWorkflows as builtinWorkflows } from '@keyflow/testing';
import { segmentKey } from '@keyflow/workflow';
import { rebuildRuns } from '../../src/rebuild';
import { WorkflowRegistry } from '../../src/workflows/registry';
import { distinctEvents, OrchestratorHarness, post } from './support';

jest.setTimeout(240_000);

const ITEMS = 1_000;

/**
 * A map step's items are kept in segments of 256 and snapshotted per segment (issue "Throughput at ETL scale",
 * target 3): a run's wf.state records do not grow with its items, and a run restored from its core record and its
 * segment records (after a SIGKILL mid-fan-out) goes on with every item's state and output.
 */
describe('a map of 1,000 items', () => {
  const h = new OrchestratorHarness('fanout');
  afterAll(() => h.teardown());

  it('survives a SIGKILL mid-fan-out: each item completes once, outputs fan in in item order, and no wf.state record grows with the items', async () => {
    let orch = await h.startOrchestrator();
    await h.startWorker();
    await h.readEvents();
    const res = await post(`${await orch.ready}/runs`, { workflow: 'fan-out', input: { count: ITEMS } });
    expect(res.status).toBe(202);
    const runId = res.body.runId as string;
    // Items emit no StepCompleted of their own; item i + 64 is scheduled when one of the 64 in flight completed.
    const itemsScheduled = () =>
      h.events.items.filter((e) => e.event === 'StepScheduled' && String(e.value.stepId).startsWith('each['))
        .length;
    await eventually('a third of the items scheduled', itemsScheduled, {
      until: (n) => n >= ITEMS / 3,
      intervalMs: 5,
    });
    const beforeKill = itemsScheduled();
    orch.kill('SIGKILL');
    await orch.exited;
    orch = await h.startOrchestrator();
    const url = await orch.ready;
    await eventually(
      'the run completed',
      () => h.events.items.find((e) => e.event === 'RunCompleted' && e.value.runId === runId),
      { timeoutMs: 180_000, intervalMs: 100 },
    );

    const events = distinctEvents(h.events).filter((e) => e.value.runId === runId);
    expect(beforeKill).toBeLessThan(ITEMS); // killed before the fan-out was done
    const scheduled = events
      .filter((e) => e.event === 'StepScheduled' && String(e.value.stepId).startsWith('each['))
      .map((e) => `${e.value.stepId}@${e.value.attempt}`);
    // Every item scheduled exactly once: the restored run knew every item's state (none was lost or re-run).
    expect(new Set(scheduled).size).toBe(ITEMS);
    expect(scheduled.every((s) => s.endsWith('@1'))).toBe(true);
    const completed = events.filter((e) => e.event === 'StepCompleted');
    const each = completed.find((e) => e.value.stepId === 'each')!;
    expect(JSON.parse(String(each.value.output))).toEqual(
      Array.from({ length: ITEMS }, (_, i) => ({ item: i })),
    );
    const sum = completed.find((e) => e.value.stepId === 'sum')!;
    expect(JSON.parse(String(sum.value.output))).toEqual({ n: ITEMS });

    // The run API lists every item among the steps.
    const view = (await (await fetch(`${url}/runs/${runId}`)).json()) as {
      steps: Record<string, { status: string; output?: unknown }>;
    };
    expect(view.steps[`each[${ITEMS - 1}]`]).toMatchObject({
      status: 'completed',
      output: { item: ITEMS - 1 },
    });

    // What wf.state holds for the run: its core records, and segment records keyed <run>/each/<k>.
    const records = new Collector<{ key: string; bytes: number; segment: boolean; status: string }>();
    await h.codec.registerTopics(['wf.state']);
    const reader = h.ns.kafka.consumer({ groupId: h.ns.groupId('state-sizes'), maxWaitTimeInMs: 100 });
    await reader.connect();
    await reader.subscribe({ topic: h.codec.physical('wf.state'), fromBeginning: true });
    await reader.run({
      eachMessage: async ({ topic, partition, message }) => {
        const key = message.key?.toString() ?? '';
        if (!message.value || !key.startsWith(runId)) return;
        const d = await h.codec.decode('wf.state', message.value, {
          topic,
          partition,
          offset: message.offset,
        });
        if (d.event !== 'RunSnapshot') return;
        records.push({
          key,
          bytes: d.value.state.length,
          segment: !!d.value.segment,
          status: d.value.status,
        });
      },
    });
    await eventually('the final core record', () =>
      records.items.find((r) => r.key === runId && r.status === 'completed'),
    );
    await reader.disconnect();
    const segmentKeys = new Set(records.items.filter((r) => r.segment).map((r) => r.key));
    expect([...segmentKeys].sort()).toEqual([0, 1, 2, 3].map((k) => segmentKey(runId, 'each', k)).sort());
    // While the items ran (before the map's fan-in put all outputs in its output), a core record is a few KiB, not
    // the ~100 KiB of 1,000 item states; a segment record holds at most 256 items.
    const cores = records.items.filter((r) => r.key === runId && r.status === 'running');
    const flatBytes = JSON.stringify(view).length;
    expect(Math.max(...cores.map((r) => r.bytes))).toBeLessThan(flatBytes / 4);
    expect(Math.max(...records.items.filter((r) => r.segment).map((r) => r.bytes))).toBeLessThan(
      flatBytes / 2,
    );

    const report = await rebuildRuns(
      h.ns.kafka,
      h.codec,
      new WorkflowRegistry().register(...builtinWorkflows),
    );
    expect(report).toMatchObject({ runsLive: 1, runsRebuilt: 1, matching: 1, differences: [] });
  });
});
