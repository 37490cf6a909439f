import { z } from 'zod/v4';
import {
  childRunIdOf,
  flatRunState,
  parentResultOf,
  reduce,
  workflow,
  type CommandSpec,
  type Decision,
  type RunState,
  type WorkflowInput,
} from '../../src';

/**
 * Child workflows (docs/workflows.md "Child workflows"): a child step's attempt is a StartRun of the child as run
 * `<parent>~<step>~<attempt>`; the child's end is the step's result; a parent that fails, is cancelled or terminated
 * cancels the children it still awaits; a failed child fails the step, retried by the parent's policy with a new child.
 */
let clock = 1_000_000;
let ids = 0;
const base = (runId = 'p1') => ({ eventId: `e${++ids}`, at: (clock += 10), runId });
const start = (runId = 'p1'): WorkflowInput => ({
  ...base(runId),
  kind: 'start',
  workflow: 'parent',
  version: 1,
  businessKey: 'b-1',
  input: { orderId: 'o-1', lines: [1, 2, 3] },
});
const completed = (c: CommandSpec, output: unknown): WorkflowInput => ({
  ...base(),
  kind: 'task-completed',
  stepId: c.stepId,
  attempt: c.attempt,
  output,
  idempotencyKey: c.idempotencyKey,
});
const failed = (c: CommandSpec, retryable: boolean): WorkflowInput => ({
  ...base(),
  kind: 'task-failed',
  stepId: c.stepId,
  attempt: c.attempt,
  errorClass: 'ChildBoom',
  message: 'child failed',
  retryable,
});

const line = workflow('line', 1, { input: z.object({ orderId: z.string(), line: z.number() }) })
  .wait('settle', { timerMs: 10 })
  .output((c) => ({ priced: c.input.line * 10 }))
  .build();

const parent = workflow('parent', 1, { input: z.object({ orderId: z.string(), lines: z.array(z.number()) }) })
  .child('first', line, {
    input: (c) => ({ orderId: c.input.orderId, line: 0 }),
    retry: { maxAttempts: 2, initialDelayMs: 10 },
  })
  .childMap('lines', line, {
    items: (c) => c.input.lines,
    input: (l, _i, c) => ({ orderId: c.input.orderId, line: l }),
    concurrency: 2,
  })
  .output((c) => ({
    first: c.outputs.first.priced,
    total: c.outputs.lines.reduce((a, o) => a + o.priced, 0),
  }))
  .build();

describe('child workflows in the reducer', () => {
  it('a child step starts its child as <parent>~<step>~<attempt> with the child workflow, input and business key', () => {
    const d = reduce(parent, undefined, start());
    expect(d.commands).toHaveLength(1);
    const [cmd] = d.commands;
    expect(cmd.child).toEqual({ workflow: 'line', version: 1, runId: 'p1~first~1' });
    expect(childRunIdOf('p1', 'first', 1)).toBe('p1~first~1');
    expect(JSON.parse(cmd.input)).toEqual({ orderId: 'o-1', line: 0 });
    expect(cmd.entityKey).toBe('b-1/first');
    expect(cmd.taskType).toBe('child:line');
  });

  it("a child map starts one child per item (up to its concurrency) and aggregates the children's outputs", () => {
    let d = reduce(parent, undefined, start());
    d = reduce(parent, d.state, completed(d.commands[0], { priced: 0 }));
    expect(d.commands.map((c) => c.child?.runId)).toEqual(['p1~lines[0]~1', 'p1~lines[1]~1']);
    const third = reduce(parent, d.state, completed(d.commands[0], { priced: 10 }));
    expect(third.commands.map((c) => c.child?.runId)).toEqual(['p1~lines[2]~1']);
    let e = reduce(parent, third.state, completed(d.commands[1], { priced: 20 }));
    e = reduce(parent, e.state, completed(third.commands[0], { priced: 30 }));
    expect(e.state!.status).toBe('completed');
    expect(e.state!.output).toEqual({ first: 0, total: 60 });
  });

  it('a result applied twice is applied once (the second is a stale result)', () => {
    let d = reduce(parent, undefined, start());
    const cmd = d.commands[0];
    d = reduce(parent, d.state, completed(cmd, { priced: 0 }));
    const again = reduce(parent, d.state, completed(cmd, { priced: 0 }));
    expect(again.ignoredReason).toBe('STALE_RESULT');
  });

  it("a failed child fails the step with the child's error and the parent's policy retries it with a new child", () => {
    let d = reduce(parent, undefined, start());
    d = reduce(parent, d.state, failed(d.commands[0], true));
    expect(d.state!.steps.first.status).toBe('waiting-retry');
    const [timerId] = Object.keys(d.state!.timers).filter((t) => t.startsWith('retry:'));
    d = reduce(parent, d.state, { ...base(), kind: 'timer-fired', timerId });
    expect(d.commands[0].child?.runId).toBe('p1~first~2');
    d = reduce(parent, d.state, failed(d.commands[0], true));
    expect(d.state!.status).toBe('failed');
    expect(d.state!.error).toMatchObject({ errorClass: 'ChildBoom', stepId: 'first' });
  });

  it('cancelling the parent cancels the children it awaits (not those that ended)', () => {
    let d = reduce(parent, undefined, start());
    d = reduce(parent, d.state, completed(d.commands[0], { priced: 0 }));
    d = reduce(parent, d.state, completed(d.commands[0], { priced: 10 }));
    d = reduce(parent, d.state, { ...base(), kind: 'cancel', reason: 'user' });
    expect(d.state!.status).toBe('cancelled');
    expect(d.cancels).toEqual([
      {
        runId: 'p1~lines[1]~1',
        reason: 'parent run p1 was cancelled',
        terminate: false,
        compensateCompleted: true,
      },
      {
        runId: 'p1~lines[2]~1',
        reason: 'parent run p1 was cancelled',
        terminate: false,
        compensateCompleted: true,
      },
    ]);
  });

  it('terminating the parent terminates the child it awaits', () => {
    const s = reduce(parent, undefined, start()).state;
    const d = reduce(parent, s, { ...base(), kind: 'cancel', reason: 'stop', terminate: true });
    expect(d.cancels).toEqual([
      {
        runId: 'p1~first~1',
        reason: 'parent run p1 was terminated',
        terminate: true,
        compensateCompleted: false,
      },
    ]);
  });

  it('a child whose step timeout passes is cancelled before the step retries', () => {
    const d = reduce(parent, undefined, start());
    const [timerId] = Object.keys(d.state!.timers).filter((t) => t.startsWith('step-timeout:'));
    const t = reduce(parent, d.state, { ...base(), kind: 'timer-fired', timerId });
    expect(t.cancels).toEqual([
      {
        runId: 'p1~first~1',
        reason: 'parent step first timed out',
        terminate: false,
        compensateCompleted: true,
      },
    ]);
    expect(t.state!.steps.first.status).toBe('waiting-retry');
  });

  it('a child run keeps its parent and reports its output, or its error, once it ends', () => {
    const parentRef = { runId: 'p1', stepId: 'first', attempt: 1, idempotencyKey: 'p1/first' };
    const begin: WorkflowInput = {
      ...base('p1~first~1'),
      kind: 'start',
      workflow: 'line',
      version: 1,
      businessKey: 'b-1/first',
      input: { orderId: 'o-1', line: 4 },
      parent: parentRef,
    };
    let d: Decision = reduce(line, undefined, begin);
    expect(d.state!.parent).toEqual(parentRef);
    expect(parentResultOf(d.state!)).toBeUndefined();
    d = reduce(line, d.state, { ...base('p1~first~1'), kind: 'timer-fired', timerId: 'wait:settle' });
    expect(parentResultOf(d.state!)).toEqual({ to: parentRef, completed: true, output: { priced: 40 } });
    const cancelled = reduce(line, reduce(line, undefined, { ...begin, eventId: 'other' }).state, {
      ...base('p1~first~1'),
      kind: 'cancel',
      reason: 'parent run p1 failed',
    });
    expect(parentResultOf(cancelled.state as RunState)).toMatchObject({
      completed: false,
      error: { errorClass: 'ChildCancelled', retryable: false },
    });
  });

  it("a parent's saga compensates a completed child: the child compensates its own steps, then reports to the parent's compensation", () => {
    const booking = workflow('booking', 1)
      .task('book', { type: 'book', compensate: { type: 'unbook' } })
      .build();
    const trip = workflow('trip', 1)
      .child('hotel', booking, { compensate: true, input: (c) => c.input })
      .task('pay', { type: 'pay', retry: { maxAttempts: 1 } })
      .build();
    // The parent: the child completes, then `pay` fails for good: the compensation of `hotel` asks the child.
    let p = reduce(trip, undefined, { ...start(), workflow: 'trip' } as WorkflowInput);
    p = reduce(trip, p.state, completed(p.commands[0], { booked: true }));
    p = reduce(trip, p.state, failed(p.commands[0], false));
    expect(p.state!.status).toBe('compensating');
    const [comp] = p.commands;
    expect(comp).toMatchObject({ stepId: 'hotel.compensate', compensateChild: { runId: 'p1~hotel~1' } });
    // The child (completed) gets the compensating cancel: it compensates `book`, ends cancelled, reports.
    const kid = 'p1~hotel~1';
    const parentRef = { runId: 'p1', stepId: 'hotel', attempt: 1, idempotencyKey: 'p1/hotel' };
    let c = reduce(booking, undefined, {
      ...start(kid),
      workflow: 'booking',
      parent: parentRef,
    } as WorkflowInput);
    c = reduce(booking, c.state, { ...completed(c.commands[0], { ok: 1 }), runId: kid });
    expect(c.state!.status).toBe('completed');
    const reportTo = {
      runId: 'p1',
      stepId: 'hotel.compensate',
      attempt: 1,
      idempotencyKey: comp.idempotencyKey,
    };
    const request: WorkflowInput = {
      ...base(kid),
      kind: 'cancel',
      reason: 'parent run p1 compensates hotel.compensate',
      compensateCompleted: true,
      reportTo,
    };
    c = reduce(booking, c.state, request);
    expect(c.commands.map((x) => x.stepId)).toEqual(['book.compensate']);
    expect(parentResultOf(c.state!)).toBeUndefined();
    // The same request again (a replay) is applied once.
    expect(reduce(booking, c.state, request).ignoredReason).toBe('DUPLICATE_REQUEST');
    c = reduce(booking, c.state, { ...completed(c.commands[0], null), runId: kid });
    expect(c.state!.status).toBe('cancelled');
    expect(parentResultOf(c.state!)).toEqual({
      to: reportTo,
      completed: true,
      output: { compensated: ['book'] },
    });
    // The parent applies the report: its saga ends compensated.
    p = reduce(trip, p.state, completed(comp, { compensated: ['book'] }));
    expect(p.state!.status).toBe('compensated');
  });

  it("a child's compensation that times out cancels no run (it awaits a report, not a child of its own)", () => {
    const booking = workflow('booking', 1)
      .task('book', { type: 'book', compensate: { type: 'unbook' } })
      .build();
    const trip = workflow('trip', 1)
      .child('hotel', booking, { compensate: true, input: (c) => c.input })
      .task('pay', { type: 'pay', retry: { maxAttempts: 1 } })
      .build();
    let p = reduce(trip, undefined, { ...start(), workflow: 'trip' } as WorkflowInput);
    p = reduce(trip, p.state, completed(p.commands[0], { booked: true }));
    p = reduce(trip, p.state, failed(p.commands[0], false));
    expect(p.commands[0]).toMatchObject({ stepId: 'hotel.compensate' });
    const timerId = Object.keys(p.state!.timers).find((t) => t.includes('hotel.compensate'));
    expect(timerId).toBeDefined();
    const t = reduce(trip, p.state, { ...base(), kind: 'timer-fired', timerId: timerId! });
    expect(t.cancels ?? []).toEqual([]);
  });

  it('a compensating cancel does not reopen a child that did not complete', () => {
    const s = reduce(line, undefined, {
      ...start('k'),
      workflow: 'line',
      input: { orderId: 'o', line: 1 },
    } as WorkflowInput).state!;
    const cancelled = reduce(line, s, { ...base('k'), kind: 'cancel', reason: 'x' }).state!;
    const again = reduce(line, cancelled, {
      ...base('k'),
      kind: 'cancel',
      reason: 'y',
      compensateCompleted: true,
    });
    expect(again.ignoredReason).toBe('RUN_ENDED');
  });

  describe("a child map's items compensated by the parent's saga", () => {
    const fanout = workflow('fanout', 1, {
      input: z.object({ orderId: z.string(), lines: z.array(z.number()) }),
    })
      .childMap('lines', line, {
        items: (c) => c.input.lines,
        input: (l, _i, c) => ({ orderId: c.input.orderId, line: l }),
        concurrency: 2,
        compensate: true,
      })
      .task('pay', { type: 'pay', retry: { maxAttempts: 1 } })
      .build();
    const begin = (lines: number[]) =>
      reduce(fanout, undefined, {
        ...start(),
        workflow: 'fanout',
        input: { orderId: 'o', lines },
      } as WorkflowInput);

    it('each completed item is compensated once, up to the concurrency at once, then the saga goes on', () => {
      let d = begin([1, 2, 3]);
      const [i0, i1] = d.commands;
      d = reduce(fanout, d.state, completed(i0, { priced: 10 }));
      const [i2] = d.commands;
      d = reduce(fanout, d.state, completed(i1, { priced: 20 }));
      d = reduce(fanout, d.state, completed(i2, { priced: 30 }));
      expect(d.state!.compensable).toEqual(['lines']);
      d = reduce(fanout, d.state, failed(d.commands[0], false));
      expect(d.state!.status).toBe('compensating');
      // Two children asked at once (the map's concurrency), each reporting to its own item's compensation.
      expect(d.commands.map((c) => [c.stepId, c.compensateChild?.runId])).toEqual([
        ['lines[0].compensate', 'p1~lines[0]~1'],
        ['lines[1].compensate', 'p1~lines[1]~1'],
      ]);
      expect(d.events.map((e) => e.type)).toEqual(['StepFailed', 'StepScheduled']);
      const [c0, c1] = d.commands;
      d = reduce(fanout, d.state, completed(c0, { compensated: ['settle'] }));
      expect(d.commands.map((c) => c.stepId)).toEqual(['lines[2].compensate']);
      const c2 = d.commands[0];
      // A report applied twice is applied once.
      expect(reduce(fanout, d.state, completed(c0, { compensated: [] })).ignoredReason).toBe('STALE_RESULT');
      d = reduce(fanout, d.state, completed(c2, { compensated: [] }));
      expect(d.state!.status).toBe('compensating');
      expect(d.commands).toEqual([]);
      d = reduce(fanout, d.state, completed(c1, { compensated: [] }));
      expect(d.state!.status).toBe('compensated');
      expect(d.state!.steps['lines.compensate']).toMatchObject({ status: 'completed', output: { items: 3 } });
      expect(flatRunState(d.state!).steps['lines[2].compensate']).toMatchObject({ status: 'completed' });
      expect(reduce(fanout, d.state, completed(c1, { compensated: [] })).ignoredReason).toBe('RUN_ENDED');
    });

    it('a map cut short compensates its completed items and cancels the others', () => {
      let d = begin([1, 2, 3]);
      const [i0, i1] = d.commands;
      d = reduce(fanout, d.state, completed(i0, { priced: 10 }));
      const [i2] = d.commands;
      d = reduce(fanout, d.state, failed(i1, false));
      expect(d.cancels?.map((x) => [x.runId, x.compensateCompleted, x.reportTo])).toEqual([
        ['p1~lines[2]~1', true, undefined],
      ]);
      expect(d.state!.status).toBe('compensating');
      expect(d.commands.map((c) => c.compensateChild?.runId)).toEqual(['p1~lines[0]~1']);
      // The cancelled child's end is stale; the compensated one's ends the saga.
      expect(reduce(fanout, d.state, failed(i2, false)).ignoredReason).toBe('STALE_RESULT');
      d = reduce(fanout, d.state, completed(d.commands[0], { compensated: ['settle'] }));
      expect(d.state!.status).toBe('compensated');
      expect(d.state!.steps['lines.compensate'].output).toEqual({ items: 1 });
    });

    it("an item's compensation that fails fails the run with its error", () => {
      let d = begin([1]);
      d = reduce(fanout, d.state, completed(d.commands[0], { priced: 10 }));
      d = reduce(fanout, d.state, failed(d.commands[0], false));
      d = reduce(fanout, d.state, failed(d.commands[0], false));
      expect(d.state!.status).toBe('failed');
      expect(d.state!.error).toMatchObject({ stepId: 'lines[0].compensate', errorClass: 'ChildBoom' });
      expect(d.state!.steps['lines.compensate'].status).toBe('failed');
    });

    it('a cancelled parent compensates the completed items of its child map', () => {
      let d = begin([1, 2]);
      d = reduce(fanout, d.state, completed(d.commands[0], { priced: 10 }));
      d = reduce(fanout, d.state, { ...base(), kind: 'cancel', reason: 'user' });
      expect(d.cancels?.map((x) => x.runId)).toEqual(['p1~lines[1]~1']);
      expect(d.commands.map((c) => c.compensateChild?.runId)).toEqual(['p1~lines[0]~1']);
      d = reduce(fanout, d.state, completed(d.commands[0], { compensated: [] }));
      expect(d.state!.status).toBe('cancelled');
    });
  });

  it('types: a child input of the wrong shape and a misread child output do not compile', () => {
    workflow('typed', 1, { input: z.object({ orderId: z.string() }) })
      // @ts-expect-error -- line is required by the child's input schema
      .child('c', line, { input: (c) => ({ orderId: c.input.orderId }) })
      // @ts-expect-error -- the child's output has `priced`, not `price`
      .task('next', { type: 't', input: (c) => c.outputs.c.price });
    expect(true).toBe(true);
  });
});
