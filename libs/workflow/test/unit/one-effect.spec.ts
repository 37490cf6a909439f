import { reduce, workflow, type CommandSpec, type Decision, type WorkflowInput } from '../../src';

/**
 * One effect per logical step (issue "Scale-out", docs/workflows.md "One effect per logical step"): every attempt of a step
 * carries the same idempotency key, a late completion of an earlier attempt is the step's one effect, a step whose
 * effect may have happened is compensated, and the compensation names the key it undoes so the worker can fence it.
 */
let clock = 2_000_000;
let ids = 0;
const base = () => ({ eventId: `x${++ids}`, at: (clock += 10), runId: 'r1' });
const ok = (c: CommandSpec, output: unknown = { done: c.stepId }): WorkflowInput => ({
  ...base(),
  kind: 'task-completed',
  stepId: c.stepId,
  attempt: c.attempt,
  output,
  idempotencyKey: c.idempotencyKey, // as the worker answers
});
const failed = (c: CommandSpec, retryable: boolean, code: string | null = null): WorkflowInput => ({
  ...base(),
  kind: 'task-failed',
  stepId: c.stepId,
  attempt: c.attempt,
  errorClass: 'Boom',
  message: 'it broke',
  retryable,
  code,
});
const fire = (d: Decision, purpose: string): WorkflowInput => {
  const [timerId] = Object.entries(d.state!.timers).find(([, t]) => t.purpose === purpose)!;
  return { ...base(), kind: 'timer-fired', timerId };
};

const order = workflow('order', 1)
  .task('reserve', { type: 'inventory.reserve', compensate: { type: 'inventory.release' } })
  .task('charge', {
    type: 'payment.charge',
    compensate: { type: 'payment.refund' },
    stepTimeoutMs: 5_000,
    retry: { maxAttempts: 3, initialDelayMs: 100 },
  })
  .task('ship', { type: 'shipping.create', retry: { maxAttempts: 1 } })
  .build();

function startAndReserve(): Decision {
  const d = reduce(order, undefined, {
    ...base(),
    kind: 'start',
    workflow: 'order',
    version: 1,
    businessKey: 'o-1',
    input: {},
  });
  return reduce(order, d.state, ok(d.commands[0]));
}

/** Times out the current attempt of charge and fires its retry: returns the decision holding the next command. */
function timeOutAndRetry(d: Decision): Decision {
  d = reduce(order, d.state, fire(d, 'step-timeout'));
  return reduce(order, d.state, fire(d, 'retry'));
}

describe('one effect per logical step', () => {
  it('every attempt of a step carries the same idempotency key, naming the run and the step', () => {
    let d = startAndReserve();
    const first = d.commands[0];
    d = timeOutAndRetry(d);
    const second = d.commands[0];
    expect([first.attempt, second.attempt]).toEqual([1, 2]);
    expect(first.idempotencyKey).toBe('r1/charge');
    expect(second.idempotencyKey).toBe(first.idempotencyKey);
  });

  it('a late completion of a timed-out attempt completes the step once; the retry result is then stale', () => {
    let d = startAndReserve();
    const first = d.commands[0];
    d = timeOutAndRetry(d);
    const second = d.commands[0];
    d = reduce(order, d.state, ok(first, { charged: 1 })); // the slow worker's attempt 1 finally answers
    expect(d.ignored).toBeUndefined();
    expect(d.state!.steps.charge).toMatchObject({ status: 'completed', output: { charged: 1 } });
    expect(d.commands).toMatchObject([{ stepId: 'ship' }]);
    expect(Object.keys(d.state!.timers).filter((t) => t.includes('charge'))).toEqual([]);
    expect(reduce(order, d.state, ok(second)).ignored).toMatch(/stale/);
  });

  it('a completion that arrives while the step waits for its retry timer completes the step and drops the retry', () => {
    let d = startAndReserve();
    const first = d.commands[0];
    d = reduce(order, d.state, fire(d, 'step-timeout'));
    expect(d.state!.steps.charge.status).toBe('waiting-retry');
    d = reduce(order, d.state, ok(first));
    expect(d.state!.steps.charge.status).toBe('completed');
    expect(Object.values(d.state!.timers).filter((t) => t.purpose === 'retry')).toEqual([]);
  });

  it('a failure of an earlier attempt is stale: only the current attempt can fail the step', () => {
    let d = startAndReserve();
    const first = d.commands[0];
    d = timeOutAndRetry(d);
    const r = reduce(order, d.state, failed(first, false));
    expect(r.ignored).toMatch(/stale/);
  });

  it('a step that timed out for good is compensated first, and its compensation names the key it undoes', () => {
    let d = startAndReserve();
    d = timeOutAndRetry(d);
    d = timeOutAndRetry(d);
    d = reduce(order, d.state, fire(d, 'step-timeout')); // attempt 3 of 3 times out: the run compensates
    expect(d.state!.status).toBe('compensating');
    expect(d.state!.compensation!.queue).toEqual(['charge', 'reserve']);
    expect(d.commands).toMatchObject([
      { stepId: 'charge.compensate', idempotencyKey: 'r1/charge.compensate', compensates: 'r1/charge' },
    ]);
    d = reduce(order, d.state, ok(d.commands[0]));
    expect(d.commands).toMatchObject([{ stepId: 'reserve.compensate', compensates: 'r1/reserve' }]);
  });

  it('a dead-lettered step is compensated (a redrive may still run it); a handler failure is not', () => {
    let d = startAndReserve();
    const dead = reduce(order, d.state, failed(d.commands[0], false, 'DEAD_LETTERED'));
    expect(dead.state!.compensation!.queue).toEqual(['charge', 'reserve']);
    d = reduce(order, d.state, failed(d.commands[0], false));
    expect(d.state!.compensation!.queue).toEqual(['reserve']);
  });

  it('a run retry keeps the failed step key; a completed step re-run on purpose gets a new generation', () => {
    let d = startAndReserve();
    d = reduce(order, d.state, ok(d.commands[0])); // charge
    d = reduce(order, d.state, failed(d.commands[0], false)); // ship fails, charge and reserve compensate
    d = reduce(order, d.state, ok(d.commands[0]));
    d = reduce(order, d.state, ok(d.commands[0]));
    expect(d.state!.status).toBe('compensated');
    const noCompensation = workflow('two', 1)
      .task('a', { type: 'a' })
      .task('b', { type: 'b', retry: { maxAttempts: 1 } })
      .build();
    let r = reduce(noCompensation, undefined, {
      ...base(),
      kind: 'start',
      workflow: 'two',
      version: 1,
      businessKey: 'k',
      input: {},
    });
    r = reduce(noCompensation, r.state, ok(r.commands[0]));
    r = reduce(noCompensation, r.state, failed(r.commands[0], false));
    const again = reduce(noCompensation, r.state, { ...base(), kind: 'retry' });
    expect(again.commands).toMatchObject([{ stepId: 'b', attempt: 2, idempotencyKey: 'r1/b' }]);
    const fromA = reduce(noCompensation, r.state, { ...base(), kind: 'retry', fromStepId: 'a' });
    expect(fromA.commands).toMatchObject([{ stepId: 'a', attempt: 2, idempotencyKey: 'r1/a#1' }]);
    const thenB = reduce(noCompensation, fromA.state, ok(fromA.commands[0]));
    expect(thenB.commands).toMatchObject([{ stepId: 'b', attempt: 2, idempotencyKey: 'r1/b' }]);
  });

  it("a step's deadline starts when it is dispatched, on the clock of the input that dispatched it", () => {
    const d = startAndReserve();
    const dispatchedAt = clock;
    expect(d.state!.steps.charge.dispatchedAt).toBe(dispatchedAt);
    expect(d.state!.timers['step-timeout:charge:1'].dueAt).toBe(dispatchedAt + 5_000);
  });
});

describe('one effect per logical step: review findings', () => {
  const timed = workflow('timed', 1)
    .task('reserve', { type: 'inventory.reserve', compensate: { type: 'inventory.release' } })
    .task('charge', {
      type: 'payment.charge',
      compensate: { type: 'payment.refund' },
      stepTimeoutMs: 5_000,
      retry: { maxAttempts: 3, initialDelayMs: 100 },
    })
    .task('ship', { type: 'shipping.create' })
    .timeout(60_000)
    .build();

  function reserved(): Decision {
    const d = reduce(timed, undefined, {
      ...base(),
      kind: 'start',
      workflow: 'timed',
      version: 1,
      businessKey: 'o-2',
      input: {},
    });
    return reduce(timed, d.state, ok(d.commands[0]));
  }

  it('a run timeout compensates the step it interrupts (its command may still run) and fences its key', () => {
    let d = reserved(); // charge is in flight
    d = reduce(timed, d.state, fire(d, 'run-timeout'));
    expect(d.state!.status).toBe('compensating');
    expect(d.state!.compensation!.queue).toEqual(['charge', 'reserve']);
    expect(d.commands).toMatchObject([{ stepId: 'charge.compensate', compensates: 'r1/charge' }]);
  });

  it('a run timeout while a step waits for its retry compensates that step too', () => {
    let d = reserved();
    d = reduce(timed, d.state, fire(d, 'step-timeout'));
    expect(d.state!.steps.charge.status).toBe('waiting-retry');
    d = reduce(timed, d.state, fire(d, 'run-timeout'));
    expect(d.state!.compensation!.queue).toEqual(['charge', 'reserve']);
  });

  it('a result carrying the key of an older generation of the step is stale', () => {
    const two = workflow('gen', 1)
      .task('email', { type: 'email', stepTimeoutMs: 5_000, retry: { maxAttempts: 5, initialDelayMs: 10 } })
      .task('next', { type: 'next', retry: { maxAttempts: 1 } })
      .build();
    let d = reduce(two, undefined, {
      ...base(),
      kind: 'start',
      workflow: 'gen',
      version: 1,
      businessKey: 'k',
      input: {},
    });
    const gen0 = d.commands[0];
    d = reduce(two, d.state, fire(d, 'step-timeout'));
    d = reduce(two, d.state, fire(d, 'retry'));
    d = reduce(two, d.state, ok(d.commands[0], { gen: 0 }));
    d = reduce(two, d.state, failed(d.commands[0], false)); // next fails: the run fails
    d = reduce(two, d.state, { ...base(), kind: 'retry', fromStepId: 'email' });
    const gen1 = d.commands[0];
    expect(gen1.idempotencyKey).toBe('r1/email#1');
    d = reduce(two, d.state, fire(d, 'step-timeout')); // generation 1 is uncertain now
    // The worker replays generation 0's record for attempt 1's late command: it names the old key.
    const late = reduce(two, d.state, ok(gen0, { gen: 0 }));
    expect(late.ignored).toMatch(/stale/);
    const current = reduce(two, d.state, ok(gen1, { gen: 1 }));
    expect(current.ignored).toBeUndefined();
  });

  it('cancelling a run that compensates lets the compensation finish', () => {
    let d = reserved();
    d = reduce(timed, d.state, ok(d.commands[0])); // charge
    d = reduce(timed, d.state, failed(d.commands[0], false)); // ship fails for good
    expect(d.state!.status).toBe('compensating');
    const c = reduce(timed, d.state, { ...base(), kind: 'cancel', reason: 'operator' });
    expect(c.ignored).toMatch(/compensating/);
  });

  it('refuses a step id that ends in .compensate (it would be taken for a compensation)', () => {
    expect(() =>
      workflow('bad', 1)
        .task('a', { type: 'a', compensate: { type: 'undo' } })
        .task('a.compensate', { type: 'b' })
        .build(),
    ).toThrow(/\.compensate/);
  });
});

describe('run retry from a named step', () => {
  it('refuses to start after the failed step (that would skip it)', () => {
    const three = workflow('three', 1)
      .task('a', { type: 'a' })
      .task('b', { type: 'b', retry: { maxAttempts: 1 } })
      .task('c', { type: 'c' })
      .build();
    let d = reduce(three, undefined, {
      ...base(),
      kind: 'start',
      workflow: 'three',
      version: 1,
      businessKey: 'k',
      input: {},
    });
    d = reduce(three, d.state, ok(d.commands[0]));
    d = reduce(three, d.state, failed(d.commands[0], false));
    expect(d.state!.status).toBe('failed');
    const skip = reduce(three, d.state, { ...base(), kind: 'retry', fromStepId: 'c' });
    expect(skip.ignored).toMatch(/after the failed step b/);
    expect(reduce(three, d.state, { ...base(), kind: 'retry', fromStepId: 'a' }).ignored).toBeUndefined();
  });
});
