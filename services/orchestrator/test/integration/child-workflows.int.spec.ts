import { Collector, eventually } from '@keyflow/testing';
import { Topic } from '@keyflow/schemas';
import { rebuildRuns } from '../../src/rebuild';
import { WorkflowRegistry } from '../../src/workflows/registry';
import { childWorkflows } from '../fixtures/test-workflows';
import { distinctEvents, OrchestratorHarness, post, type Lifecycle, type ServiceProcess } from './support';

jest.setTimeout(300_000);

const CHILDREN = 100;

/**
 * Child workflows (docs/workflows.md "Child workflows"): a parent's child steps start runs of another workflow on the
 * partitions of their own run ids, and take their ends as the steps' results, exactly once across partitions, through
 * a SIGKILL of an orchestrator instance; a failed child fails the step (retried with a new child by the parent's
 * policy); a cancelled parent cancels the children it awaits.
 */
describe('child workflows', () => {
  const h = new OrchestratorHarness('child');
  let killed: ServiceProcess;
  let url: string;
  let reader: ReturnType<OrchestratorHarness['ns']['kafka']['consumer']>;
  /** Every TaskCompleted / TaskFailed on task.results (read_committed), by the run it is for. */
  const results = new Collector<{ runId: string; stepId: string; attempt: number; event: string }>();

  beforeAll(async () => {
    killed = await h.startOrchestrator();
    url = await (await h.startOrchestrator()).ready;
    await h.readEvents();
    // `child.undo` undoes, `child.pay` is declined. The children's one task: doubles `n`; holds (never answers) with `hold`; with `fail`, fails the first child of
    // a parent's step `one` (retryable unless n is 99).
    await h.simulateWorker(['child.work', 'child.undo', 'child.pay'], (cmd) => {
      if (cmd.taskType === 'child.undo') return { output: { undone: true } };
      if (cmd.taskType === 'child.pay') return { error: 'PaymentDeclined', retryable: false };
      const input = JSON.parse(cmd.input) as { n: number; fail?: boolean; hold?: boolean };
      if (input.hold) return undefined;
      if (input.fail && cmd.runId.endsWith('~one~1'))
        return { error: 'LineBroken', retryable: input.n !== 99 };
      return { output: { doubled: input.n * 2 } };
    });
    reader = h.ns.kafka.consumer({ groupId: h.ns.groupId('results'), maxWaitTimeInMs: 100 });
    await reader.connect();
    await reader.subscribe({ topic: h.codec.physical(Topic.TASK_RESULTS), fromBeginning: true });
    await reader.run({
      eachMessage: async ({ topic, partition, message }) => {
        const d = await h.codec.decode(Topic.TASK_RESULTS, message.value, {
          topic,
          partition,
          offset: message.offset,
        });
        const v = d.value as { runId: string; stepId: string; attempt: number };
        results.push({ runId: v.runId, stepId: v.stepId, attempt: v.attempt, event: d.event });
      },
    });
  });
  afterAll(async () => {
    await reader?.disconnect();
    await h.teardown();
  });

  const ofRun = (runId: string) => distinctEvents(h.events).filter((e) => e.value.runId === runId);
  const children = (parent: string) =>
    distinctEvents(h.events).filter((e) => String(e.value.runId).startsWith(`${parent}~`));
  const ended = async (runId: string, event = 'RunCompleted'): Promise<Lifecycle> =>
    (await eventually(`${runId} ${event}`, () => ofRun(runId).find((e) => e.event === event), {
      timeoutMs: 180_000,
      intervalMs: 100,
    }))!;
  async function start(workflow: string, input: unknown): Promise<string> {
    const res = await post(`${url}/runs`, { workflow, input });
    expect(res.status).toBe(202);
    return res.body.runId as string;
  }
  const perRun = (events: Lifecycle[], type: string) => {
    const counts = new Map<string, number>();
    for (const e of events.filter((x) => x.event === type))
      counts.set(String(e.value.runId), (counts.get(String(e.value.runId)) ?? 0) + 1);
    return counts;
  };

  it('a parent with a map of 100 children on other partitions completes through a SIGKILL of an instance: each child started once and applied once', async () => {
    const parent = await start('child-fanout', { count: CHILDREN });
    await eventually(
      'a third of the children completed',
      () => children(parent).filter((e) => e.event === 'RunCompleted').length,
      { until: (n) => n >= CHILDREN / 3, intervalMs: 20, timeoutMs: 120_000 },
    );
    expect(ofRun(parent).some((e) => e.event === 'RunCompleted')).toBe(false); // killed mid-way
    killed.kill('SIGKILL');
    await killed.exited;
    const done = await ended(parent);
    expect(JSON.parse(String(done.value.output))).toEqual({ total: CHILDREN * (CHILDREN - 1) });

    const kids = children(parent);
    const started = perRun(kids, 'RunStarted');
    // One child run per item, each started once (its StartRun, written with the parent's state, replayed or not).
    expect([...started.keys()].sort()).toEqual(
      Array.from({ length: CHILDREN }, (_, i) => `${parent}~lines[${i}]~1`).sort(),
    );
    expect([...started.values()].every((n) => n === 1)).toBe(true);
    expect([...perRun(kids, 'RunCompleted').values()]).toEqual(Array(CHILDREN).fill(1));
    // Each child's end written to the parent once, and the parent applied each once (every item completed on its
    // first attempt, the fan-in counted 100).
    await eventually('every child result read', () => results.items.filter((r) => r.runId === parent), {
      until: (rs) => rs.length >= CHILDREN,
    });
    const toParent = results.items.filter((r) => r.runId === parent);
    expect(toParent).toHaveLength(CHILDREN);
    expect(new Set(toParent.map((r) => r.stepId)).size).toBe(CHILDREN);
    const view = (await (await fetch(`${url}/runs/${parent}`)).json()) as {
      steps: Record<string, { status: string; attempt: number; map?: { done: number } }>;
      children: Array<{ stepId: string; runId: string }>;
    };
    expect(view.steps.lines.map?.done).toBe(CHILDREN);
    expect(view.steps[`lines[${CHILDREN - 1}]`]).toMatchObject({ status: 'completed', attempt: 1 });
    // The parent's view lists its children; a child's names its parent.
    expect(view.children).toHaveLength(CHILDREN);
    expect(view.children[0]).toEqual({ stepId: 'lines[0]', attempt: 1, runId: `${parent}~lines[0]~1` });
    const child = (await (
      await fetch(`${url}/runs/${encodeURIComponent(`${parent}~lines[7]~1`)}`)
    ).json()) as { parent: unknown; output: unknown };
    expect(child.parent).toMatchObject({ runId: parent, stepId: 'lines[7]', attempt: 1 });
    expect(child.output).toEqual({ doubled: 14 });
  });

  it("a failed child fails the parent's step, whose retry policy retries it with a new child", async () => {
    const parent = await start('child-retry', { n: 5, fail: true });
    const done = await ended(parent);
    expect(JSON.parse(String(done.value.output))).toEqual({ one: { doubled: 10 } });
    const failed = ofRun(parent).find((e) => e.event === 'StepFailed')!;
    expect(failed.value).toMatchObject({ stepId: 'one', attempt: 1, willRetry: true });
    expect((failed.value.error as { errorClass: string }).errorClass).toBe('LineBroken');
    const kids = children(parent);
    expect(kids.find((e) => e.event === 'RunFailed')?.value.runId).toBe(`${parent}~one~1`);
    expect(kids.find((e) => e.event === 'RunCompleted')?.value.runId).toBe(`${parent}~one~2`);
  });

  it("a child that fails with a non-retryable error fails the parent with the child's error", async () => {
    const parent = await start('child-retry', { n: 99, fail: true });
    const failed = await ended(parent, 'RunFailed');
    expect(String(failed.value.reason)).toMatch(/^LineBroken: child run .*~one~1 failed at step work/);
    expect(children(parent).filter((e) => e.event === 'RunStarted')).toHaveLength(1);
  });

  it('cancelling a parent cancels every child it still awaits', async () => {
    const parent = await start('child-fanout', { count: 5, hold: true });
    await eventually('5 children started', () => children(parent).filter((e) => e.event === 'RunStarted'), {
      until: (es) => es.length === 5,
    });
    expect((await post(`${url}/runs/${parent}/cancel`, { reason: 'no longer needed' })).status).toBe(202);
    await ended(parent, 'RunCancelled');
    const cancelled = await eventually(
      'every child cancelled',
      () => children(parent).filter((e) => e.event === 'RunCancelled'),
      { until: (es) => es.length === 5 },
    );
    expect(cancelled.map((e) => String(e.value.reason))).toEqual(
      Array(5).fill(`parent run ${parent} was cancelled`),
    );
  });

  it("a parent's saga compensates its completed child: the child's own compensations run, then the parent's step is compensated once", async () => {
    const parent = await start('child-saga', { n: 3 });
    await ended(parent, 'RunCompensated');
    const kid = `${parent}~booked~1`;
    const kidEvents = ofRun(kid).map((e) => `${e.event}${e.value.stepId ? ` ${e.value.stepId}` : ''}`);
    expect(kidEvents).toEqual([
      'RunStarted',
      'StepScheduled book',
      'StepCompleted book',
      'RunCompleted',
      'StepScheduled book.compensate',
      'StepCompleted book.compensate',
      'RunCancelled',
    ]);
    const compensated = ofRun(parent).filter(
      (e) => e.event === 'StepCompleted' && e.value.stepId === 'booked.compensate',
    );
    expect(compensated).toHaveLength(1);
    expect(JSON.parse(String(compensated[0].value.output))).toEqual({ compensated: ['book'] });
  });

  it("a parent's saga compensates every completed item of its child map once: each child's own compensations run, then the parent ends compensated", async () => {
    const parent = await start('child-map-saga', { count: 3 });
    const done = await ended(parent, 'RunCompensated');
    expect(done.value.compensatedSteps).toEqual(['booked']);
    for (let i = 0; i < 3; i++) {
      const kid = `${parent}~booked[${i}]~1`;
      expect(ofRun(kid).map((e) => `${e.event}${e.value.stepId ? ` ${e.value.stepId}` : ''}`)).toEqual([
        'RunStarted',
        'StepScheduled book',
        'StepCompleted book',
        'RunCompleted',
        'StepScheduled book.compensate',
        'StepCompleted book.compensate',
        'RunCancelled',
      ]);
    }
    // One compensation result per child, one report per item to the parent, applied once.
    await eventually('every report read', () => results.items.filter((r) => r.runId === parent), {
      until: (rs) => rs.filter((r) => r.stepId.endsWith('.compensate')).length >= 3,
    });
    const undone = results.items.filter(
      (r) => r.runId.startsWith(`${parent}~`) && r.stepId === 'book.compensate',
    );
    expect(undone.map((r) => r.runId).sort()).toEqual([0, 1, 2].map((i) => `${parent}~booked[${i}]~1`));
    const reports = results.items.filter((r) => r.runId === parent && r.stepId.endsWith('.compensate'));
    expect(reports.map((r) => r.stepId).sort()).toEqual([0, 1, 2].map((i) => `booked[${i}].compensate`));
    const compensated = ofRun(parent).filter(
      (e) => e.event === 'StepCompleted' && e.value.stepId === 'booked.compensate',
    );
    expect(compensated).toHaveLength(1);
    expect(JSON.parse(String(compensated[0].value.output))).toEqual({ items: 3 });
  });

  it("a child StartRun the child's engine refuses (its input schema) fails the parent's step at once, not at its step timeout, and is not retried", async () => {
    const parent = await start('child-refused', { n: 'seven' });
    const failed = await ended(parent, 'RunFailed');
    expect(String(failed.value.reason)).toMatch(
      /^ChildStartRefusedError: child run .*~bad~1 of child-line was refused: INVALID_REQUEST: StartRun.input does not match/,
    );
    const stepFailed = ofRun(parent).filter((e) => e.event === 'StepFailed');
    expect(stepFailed).toHaveLength(1);
    expect(stepFailed[0].value).toMatchObject({ stepId: 'bad', attempt: 1, willRetry: false });
    expect((stepFailed[0].value.error as { code: string }).code).toBe('CHILD_START_REFUSED');
    expect(children(parent)).toEqual([]); // the child never started

    // Its StartRun is in wf.requests.dlq. Redriven (say, after a child version that takes the input is deployed), it
    // would start a child no parent step awaits: the redrive refuses it, naming the parent, unless allowRerun.
    const child = `${parent}~bad~1`;
    const redrive = (body: Record<string, unknown>) =>
      post(`${url}/ops/dlq/wf.requests.dlq/redrive`, { key: child, ...body });
    const dry = await eventually('the StartRun in wf.requests.dlq', () => redrive({ dryRun: true }), {
      until: (r) => r.status === 200 && (r.body.refused as number) + (r.body.moved as number) >= 1,
    });
    expect(dry.body).toMatchObject({ moved: 0, refused: 1 });
    expect((dry.body.refusals as Array<{ code: string; reason: string }>)[0]).toMatchObject({
      code: 'RUN_ENDED',
      reason: expect.stringContaining(`child run ${child}`),
    });
    expect((await redrive({})).body).toMatchObject({ moved: 0, refused: 1 });
    expect((await redrive({ dryRun: true, allowRerun: true })).body).toMatchObject({ moved: 1, refused: 0 });
    expect(children(parent)).toEqual([]);
  });

  it("a rebuild from the topics gives every parent and child run the state the engine committed (the children's parents included)", async () => {
    const report = await rebuildRuns(h.ns.kafka, h.codec, new WorkflowRegistry().register(...childWorkflows));
    expect(report.differences).toEqual([]);
    expect(report.matching).toBe(report.runsLive);
    expect(report.runsLive).toBeGreaterThan(CHILDREN);
  });
});
