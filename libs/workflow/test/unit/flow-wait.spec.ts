import { reduce, workflow, type Decision, type RunState, type WorkflowInput } from '../../src';

/**
 * A step's deadline starts when its task is admitted by the worker's flow limit (issue 43, flow control): a worker's
 * TaskWaiting reports (`task-waiting` inputs) restart it, so a wait in the limiter costs no attempt.
 */
const STEP_TIMEOUT = 1_000;
const def = workflow('limited', 1)
  .task('charge', {
    type: 'limited.charge',
    stepTimeoutMs: STEP_TIMEOUT,
    retry: { maxAttempts: 2, initialDelayMs: 10, maxDelayMs: 10 },
    compensate: { type: 'refund', timeoutMs: 500 },
  })
  .task('ship', { type: 'ship' })
  .map('each', { type: 'item', items: () => [1, 2], stepTimeoutMs: STEP_TIMEOUT })
  .build();

let ids = 0;
const at = (t: number, runId = 'r1') => ({ eventId: `e${++ids}`, at: t, runId });
const start = (t: number): WorkflowInput => ({
  ...at(t),
  kind: 'start',
  workflow: def.name,
  version: def.version,
  businessKey: 'k',
  input: {},
});
const waiting = (t: number, stepId: string, attempt = 1, admitted = false, key?: string): WorkflowInput => ({
  ...at(t),
  kind: 'task-waiting',
  stepId,
  attempt,
  admitted,
  ...(key ? { idempotencyKey: key } : {}),
});
/** A TimerFired applied at `t`, published for the timer's due time `dueAt` (TimerFired.dueAt) when given. */
const fire = (t: number, timerId: string, dueAt?: number): WorkflowInput => ({
  ...at(t),
  kind: 'timer-fired',
  timerId,
  ...(dueAt === undefined ? {} : { dueAt }),
});
const ok = (t: number, stepId: string, attempt = 1): WorkflowInput => ({
  ...at(t),
  kind: 'task-completed',
  stepId,
  attempt,
  output: {},
});
const deadlineOf = (s: RunState, stepId: string, attempt = 1) =>
  s.timers[`step-timeout:${stepId}:${attempt}`]?.dueAt;

describe('step deadline and flow-control waits (task-waiting)', () => {
  it("a report for the step's current attempt restarts its deadline at the report, emitting nothing", () => {
    const d0 = reduce(def, undefined, start(10_000));
    expect(deadlineOf(d0.state!, 'charge')).toBe(11_000);
    const d1 = reduce(def, d0.state, waiting(10_600, 'charge'));
    expect(d1.ignored).toBeUndefined();
    expect(deadlineOf(d1.state!, 'charge')).toBe(11_600);
    expect(d1.events).toEqual([]);
    expect(d1.commands).toEqual([]);
    // Each report restarts it again; the admission too.
    const d2 = reduce(def, d1.state, waiting(11_500, 'charge'));
    expect(deadlineOf(d2.state!, 'charge')).toBe(12_500);
    const d3 = reduce(def, d2.state, waiting(12_400, 'charge', 1, true, 'r1/charge'));
    expect(deadlineOf(d3.state!, 'charge')).toBe(13_400);
    // The step then completes at attempt 1, although 2.4 s (more than its 1 s deadline) passed since its dispatch.
    const d4 = reduce(def, d3.state, ok(13_000, 'charge'));
    expect(d4.events.map((e) => e.type)).toEqual(['StepCompleted', 'StepScheduled']);
    expect(d4.state!.steps.charge).toMatchObject({ status: 'completed', attempt: 1 });
  });

  it('a stale report (another attempt, a step not waiting for a result, another generation, a passed deadline) changes nothing', () => {
    const d0 = reduce(def, undefined, start(20_000));
    const s0 = d0.state!;
    for (const input of [
      waiting(20_100, 'charge', 2),
      waiting(20_100, 'ship'),
      waiting(20_100, 'charge', 1, false, 'r1/charge#1'),
      waiting(20_100, 'charge.compensate'),
      waiting(21_000, 'charge'), // at its deadline: the step timeout wins (its TimerFired may be on its way)
    ])
      expect(reduce(def, s0, input)).toMatchObject({ state: s0, ignoredReason: 'STALE_RESULT', events: [] });
    // After the step completed, a late (duplicate) admission report is stale too.
    const done = reduce(def, s0, ok(20_200, 'charge')).state!;
    expect(reduce(def, done, waiting(20_300, 'charge', 1, true))).toMatchObject({
      state: done,
      ignoredReason: 'STALE_RESULT',
    });
  });

  it('when reports stop (the worker died while waiting), the deadline from the last one fires and the step is retried', () => {
    let d: Decision = reduce(def, undefined, start(30_000));
    d = reduce(def, d.state, waiting(30_500, 'charge'));
    d = reduce(def, d.state, waiting(31_200, 'charge'));
    expect(deadlineOf(d.state!, 'charge')).toBe(32_200);
    // The original deadline (31 000) is gone; the one of the last report fires.
    d = reduce(def, d.state, fire(32_200, 'step-timeout:charge:1'));
    expect(d.events).toMatchObject([
      {
        type: 'StepFailed',
        stepId: 'charge',
        attempt: 1,
        error: { errorClass: 'StepTimeoutError' },
        willRetry: true,
      },
    ]);
    // A report of the timed-out attempt that arrives afterwards is stale.
    expect(reduce(def, d.state, waiting(32_300, 'charge')).ignoredReason).toBe('STALE_RESULT');
  });

  it('a TimerFired published for a deadline that a report has moved since is stale: the step is timed out by the moved deadline only', () => {
    // The engine publishes TimerFired at the old deadline; a report applied before it (its clock just before that
    // deadline) moves the deadline on. The TimerFired that was on its way names the deadline it fired for.
    let d: Decision = reduce(def, undefined, start(40_000));
    expect(deadlineOf(d.state!, 'charge')).toBe(41_000);
    d = reduce(def, d.state, waiting(40_990, 'charge'));
    expect(deadlineOf(d.state!, 'charge')).toBe(41_990);
    const early = reduce(def, d.state, fire(41_005, 'step-timeout:charge:1', 41_000));
    expect(early).toMatchObject({ state: d.state, ignoredReason: 'STALE_TIMER', events: [] });
    // The moved deadline's own TimerFired times the attempt out.
    d = reduce(def, d.state, fire(41_995, 'step-timeout:charge:1', 41_990));
    expect(d.events).toMatchObject([
      { type: 'StepFailed', stepId: 'charge', attempt: 1, error: { errorClass: 'StepTimeoutError' } },
    ]);
  });

  it('a restarted deadline keeps its length on the next attempt: a new dispatch starts it from the dispatch again', () => {
    let d: Decision = reduce(def, undefined, start(40_000));
    d = reduce(def, d.state, waiting(40_900, 'charge'));
    d = reduce(def, d.state, fire(41_900, 'step-timeout:charge:1'));
    d = reduce(
      def,
      d.state,
      fire(
        41_910,
        Object.keys(d.state!.timers).find((t) => t.startsWith('retry:'))!,
      ),
    );
    expect(d.commands).toMatchObject([{ stepId: 'charge', attempt: 2 }]);
    expect(deadlineOf(d.state!, 'charge', 2)).toBe(42_910);
    d = reduce(def, d.state, waiting(42_000, 'charge', 2));
    expect(deadlineOf(d.state!, 'charge', 2)).toBe(43_000);
  });

  it("an earlier attempt that still holds the step's lease and waits in line moves the current attempt's deadline (its outcome is the step's)", () => {
    // Attempt 1 missed its deadline once (fetched late); attempt 2 then waits behind attempt 1's idempotency lease,
    // while attempt 1 waits in the flow line and reports it: the step must not run out of attempts meanwhile.
    let d: Decision = reduce(def, undefined, start(50_000));
    d = reduce(def, d.state, fire(51_000, 'step-timeout:charge:1'));
    d = reduce(
      def,
      d.state,
      fire(
        51_010,
        Object.keys(d.state!.timers).find((t) => t.startsWith('retry:'))!,
      ),
    );
    expect(deadlineOf(d.state!, 'charge', 2)).toBe(52_010);
    d = reduce(def, d.state, waiting(51_900, 'charge', 1, false, 'r1/charge'));
    expect(d.ignored).toBeUndefined();
    expect(deadlineOf(d.state!, 'charge', 2)).toBe(52_900);
    d = reduce(def, d.state, waiting(52_800, 'charge', 1, true, 'r1/charge'));
    expect(deadlineOf(d.state!, 'charge', 2)).toBe(53_800);
    // A later attempt's report than the current one is still stale.
    expect(reduce(def, d.state, waiting(52_850, 'charge', 3)).ignoredReason).toBe('STALE_RESULT');
  });

  it("a new attempt's deadline does not inherit the previous attempt's last report (an owner whose clock is behind)", () => {
    let d: Decision = reduce(def, undefined, start(60_000));
    d = reduce(def, d.state, waiting(60_900, 'charge'));
    d = reduce(def, d.state, fire(61_900, 'step-timeout:charge:1'));
    // The next owner's clock is 1.4 s behind: it dispatches attempt 2 at 60 500.
    d = reduce(
      def,
      d.state,
      fire(
        60_500,
        Object.keys(d.state!.timers).find((t) => t.startsWith('retry:'))!,
      ),
    );
    expect(deadlineOf(d.state!, 'charge', 2)).toBe(61_500);
    d = reduce(def, d.state, waiting(60_600, 'charge', 2));
    expect(deadlineOf(d.state!, 'charge', 2)).toBe(61_600);
  });

  it("a map item's report restarts that item's deadline only", () => {
    let d: Decision = reduce(def, undefined, start(50_000));
    d = reduce(def, d.state, ok(50_100, 'charge'));
    d = reduce(def, d.state, ok(50_200, 'ship'));
    expect(d.commands.map((c) => c.stepId)).toEqual(['each[0]', 'each[1]']);
    d = reduce(def, d.state, waiting(50_800, 'each[1]'));
    expect(d.ignored).toBeUndefined();
    expect(deadlineOf(d.state!, 'each[1]')).toBe(51_800);
    expect(deadlineOf(d.state!, 'each[0]')).toBe(51_200);
  });

  it("a compensation's report restarts the compensation's deadline", () => {
    let d: Decision = reduce(def, undefined, start(60_000));
    d = reduce(def, d.state, ok(60_100, 'charge'));
    d = reduce(def, d.state, { ...at(60_200), kind: 'cancel', reason: 'test' });
    expect(d.commands).toMatchObject([{ stepId: 'charge.compensate' }]);
    const before = deadlineOf(d.state!, 'charge.compensate')!;
    const length = before - 60_200;
    d = reduce(def, d.state, waiting(60_700, 'charge.compensate'));
    expect(d.ignored).toBeUndefined();
    expect(deadlineOf(d.state!, 'charge.compensate')).toBe(60_700 + length);
  });
});
