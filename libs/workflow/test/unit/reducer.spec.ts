import fc from 'fast-check';
import {
  IGNORE_REASONS,
  assembleRunState,
  runOfSegmentKey,
  segmentKey,
  snapshotParts,
  type ItemSegment,
  type SnapshotParts,
  copyRunState,
  flatRunState,
  normalizeRunState,
  PendingRuns,
  SEGMENT_ITEMS,
  reduce,
  workflow,
  dueTimers,
  type CommandSpec,
  type Decision,
  type RunState,
  type WorkflowDefinition,
  type WorkflowInput,
} from '../../src';

let clock = 1_000_000;
let ids = 0;
const base = (runId = 'r1') => ({ eventId: `e${++ids}`, at: (clock += 10), runId });
const start = (def: WorkflowDefinition, input: Record<string, unknown> = {}): WorkflowInput => ({
  ...base(),
  kind: 'start',
  workflow: def.name,
  version: def.version,
  businessKey: 'order-1',
  input,
});
const ok = (c: CommandSpec, output: unknown = { done: c.stepId }): WorkflowInput => ({
  ...base(),
  kind: 'task-completed',
  stepId: c.stepId,
  attempt: c.attempt,
  output,
});
const fail = (
  c: CommandSpec,
  retryable = true,
  errorClass = 'Boom',
  code: string | null = null,
): WorkflowInput => ({
  ...base(),
  kind: 'task-failed',
  stepId: c.stepId,
  attempt: c.attempt,
  errorClass,
  message: 'it broke',
  retryable,
  code,
});
const fire = (s: RunState, purpose?: string): WorkflowInput => {
  const [id] = Object.entries(s.timers).find(([, t]) => !purpose || t.purpose === purpose)!;
  return { ...base(), kind: 'timer-fired', timerId: id };
};

/** Applies inputs in order, returning every decision. */
function run(def: WorkflowDefinition, inputs: WorkflowInput[], from?: RunState) {
  let s = from;
  const decisions: Decision[] = [];
  for (const i of inputs) {
    const d = reduce(def, s, i);
    s = d.state;
    decisions.push(d);
  }
  return { state: s!, decisions };
}

const saga = workflow('order', 1)
  .task('reserve', { type: 'inventory.reserve', compensate: { type: 'inventory.release' } })
  .task('charge', {
    type: 'payment.charge',
    input: (c) => ({ amount: c.input.amount }),
    compensate: { type: 'payment.refund' },
    retry: { maxAttempts: 2, initialDelayMs: 100 },
  })
  .task('ship', {
    type: 'shipping.create',
    retry: { maxAttempts: 3, initialDelayMs: 100, nonRetryableErrors: ['AddressInvalid'] },
  })
  .build();

describe('the workflow reducer', () => {
  it('runs a 3-step sequence to completion, feeding outputs forward', () => {
    let d = reduce(saga, undefined, start(saga, { amount: 42 }));
    expect(d.events.map((e) => e.type)).toEqual(['RunStarted', 'StepScheduled']);
    expect(d.commands).toMatchObject([
      {
        stepId: 'reserve',
        taskType: 'inventory.reserve',
        attempt: 1,
        entityKey: 'order-1',
        idempotencyKey: 'r1/reserve',
      },
    ]);
    d = reduce(saga, d.state, ok(d.commands[0]));
    expect(d.commands).toMatchObject([{ stepId: 'charge', input: '{"amount":42}' }]);
    d = reduce(saga, d.state, ok(d.commands[0]));
    d = reduce(saga, d.state, ok(d.commands[0], { tracking: 'T1' }));
    expect(d.state!.status).toBe('completed');
    expect(JSON.parse((d.events.at(-1) as { output: string }).output)).toMatchObject({
      ship: { tracking: 'T1' },
    });
    expect(d.state!.timers).toEqual({});
  });

  it('retries a retryable failure after a durable backoff timer, under the same idempotency key', () => {
    let d = reduce(saga, undefined, start(saga));
    d = reduce(saga, d.state, ok(d.commands[0]));
    d = reduce(saga, d.state, fail(d.commands[0]));
    expect(d.commands).toEqual([]);
    expect(d.events).toMatchObject([{ type: 'StepFailed', stepId: 'charge', willRetry: true }]);
    const timer = Object.values(d.state!.timers).find((t) => t.purpose === 'retry')!;
    expect(timer.dueAt - d.state!.updatedAt).toBeLessThanOrEqual(100);
    d = reduce(saga, d.state, fire(d.state!, 'retry'));
    expect(d.commands).toMatchObject([{ stepId: 'charge', attempt: 2, idempotencyKey: 'r1/charge' }]);
  });

  it("keeps the worker's error code on the step and on its StepFailed event", () => {
    let d = reduce(saga, undefined, start(saga));
    d = reduce(saga, d.state, ok(d.commands[0]));
    d = reduce(saga, d.state, fail(d.commands[0], false, 'CardDeclined', 'CARD_DECLINED'));
    expect(d.events.find((e) => e.type === 'StepFailed')).toMatchObject({
      error: { errorClass: 'CardDeclined', code: 'CARD_DECLINED' },
    });
    expect(d.state!.steps.charge.error).toMatchObject({ code: 'CARD_DECLINED' });
  });

  it('saga: a failing third step compensates steps two and one, in that order, and the run ends compensated', () => {
    let d = reduce(saga, undefined, start(saga));
    d = reduce(saga, d.state, ok(d.commands[0]));
    d = reduce(saga, d.state, ok(d.commands[0]));
    d = reduce(saga, d.state, fail(d.commands[0], false, 'AddressInvalid'));
    expect(d.state!.status).toBe('compensating');
    expect(d.commands).toMatchObject([{ stepId: 'charge.compensate', taskType: 'payment.refund' }]);
    d = reduce(saga, d.state, ok(d.commands[0]));
    expect(d.commands).toMatchObject([{ stepId: 'reserve.compensate', taskType: 'inventory.release' }]);
    d = reduce(saga, d.state, ok(d.commands[0]));
    expect(d.state!.status).toBe('compensated');
    expect(d.events.at(-1)).toEqual({
      type: 'RunCompensated',
      failedStepId: 'ship',
      compensatedSteps: ['charge', 'reserve'],
    });
  });

  it('a compensation that fails for good fails the run with the compensation error', () => {
    let d = reduce(saga, undefined, start(saga));
    d = reduce(saga, d.state, ok(d.commands[0]));
    d = reduce(saga, d.state, ok(d.commands[0]));
    d = reduce(saga, d.state, fail(d.commands[0], false, 'AddressInvalid'));
    d = reduce(saga, d.state, fail(d.commands[0], false, 'RefundRefused'));
    expect(d.state!.status).toBe('failed');
    expect(d.events.at(-1)).toMatchObject({
      type: 'RunFailed',
      failedStepId: 'ship',
      reason: expect.stringContaining('charge.compensate failed: RefundRefused'),
    });
  });

  it('a step whose worker never answers times out, is retried per policy, then compensates', () => {
    let d = reduce(saga, undefined, start(saga));
    d = reduce(saga, d.state, ok(d.commands[0]));
    for (let attempt = 1; attempt <= 2; attempt++) {
      expect(d.commands).toMatchObject([{ stepId: 'charge', attempt }]);
      d = reduce(saga, d.state, fire(d.state!, 'step-timeout'));
      expect(d.events[0]).toMatchObject({
        type: 'StepFailed',
        error: { errorClass: 'StepTimeoutError' },
        willRetry: attempt < 2,
      });
      if (attempt < 2) d = reduce(saga, d.state, fire(d.state!, 'retry'));
    }
    expect(d.state!.status).toBe('compensating');
    // The timed-out charge may have happened: it is compensated first, its key fenced by the compensation.
    expect(d.commands).toMatchObject([{ stepId: 'charge.compensate', compensates: 'r1/charge' }]);
  });

  it('ignores stale results, stale timers and duplicate starts, changing nothing', () => {
    let d = reduce(saga, undefined, start(saga));
    const first = d.commands[0];
    const s0 = d.state!;
    expect(reduce(saga, s0, start(saga))).toMatchObject({
      ignored: 'duplicate start',
      ignoredReason: 'DUPLICATE_START',
    });
    expect(reduce(saga, undefined, ok(first)).ignoredReason).toBe('UNKNOWN_RUN');
    d = reduce(saga, s0, fail(first));
    const retryTimer = fire(d.state!, 'retry');
    d = reduce(saga, d.state, retryTimer);
    const afterRetry = d.state!;
    const late = reduce(saga, afterRetry, ok(first)); // the attempt-1 result arrives late
    expect(late).toMatchObject({
      state: afterRetry,
      commands: [],
      events: [],
      ignored: expect.stringContaining('stale result'),
      ignoredReason: 'STALE_RESULT',
    });
    expect(reduce(saga, afterRetry, retryTimer)).toMatchObject({
      ignored: expect.stringMatching(/stale timer/),
      ignoredReason: 'STALE_TIMER',
    });
    expect(IGNORE_REASONS).toContain(late.ignoredReason);
  });

  it('choice takes the branch whose condition holds; map fans out with a concurrency limit and fans in in item order', () => {
    const def = workflow('etl', 1)
      .task('list', { type: 'list' })
      .choice(
        'size',
        [
          {
            when: (c) => (c.outputs.list as number[]).length > 2,
            steps: (b) =>
              b.map('each', {
                type: 'work',
                items: (c) => c.outputs.list as number[],
                concurrency: 2,
                aggregate: (o) => (o as number[]).reduce((a, b) => a + b, 0),
              }),
          },
        ],
        (b) => b.task('small', { type: 'small' }),
      )
      .build();
    let d = reduce(def, undefined, start(def));
    d = reduce(def, d.state, ok(d.commands[0], [1, 2, 3, 4]));
    expect(d.commands.map((c) => c.stepId)).toEqual(['each[0]', 'each[1]']);
    const pending = [...d.commands];
    const outputs: Record<string, number> = { 'each[0]': 10, 'each[1]': 20, 'each[2]': 30, 'each[3]': 40 };
    while (pending.length) {
      const c = pending.pop()!; // out of order on purpose
      d = reduce(def, d.state, ok(c, outputs[c.stepId]));
      pending.push(...d.commands.filter((x) => x.stepId.startsWith('each[')));
      const inFlight = Object.entries(d.state!.steps).filter(
        ([id, st]) => id.startsWith('each[') && st.status === 'scheduled',
      ).length;
      expect(inFlight).toBeLessThanOrEqual(2);
    }
    expect(d.state!.status).toBe('completed');
    expect(d.state!.steps.each.output).toBe(100);
    expect(d.state!.plan).toEqual(['list', 'size', 'each']);
  });

  it('waits for a signal (delivered before or after the wait starts) and for timers', () => {
    const def = workflow('approval', 1)
      .task('prepare', { type: 'prep' })
      .wait('approve', { signal: 'approved', timerMs: 60_000 })
      .wait('cool-off', { timerMs: 1_000 })
      .build();
    let d = reduce(def, undefined, start(def));
    d = reduce(def, d.state, ok(d.commands[0]));
    expect(d.state!.status).toBe('waiting');
    d = reduce(def, d.state, { ...base(), kind: 'signal', signal: 'approved', payload: { by: 'ann' } });
    expect(d.state!.steps.approve).toMatchObject({ status: 'completed', output: { by: 'ann' } });
    d = reduce(def, d.state, fire(d.state!, 'wait'));
    expect(d.state!.status).toBe('completed');

    let e = reduce(def, undefined, { ...start(def), runId: 'r2' });
    const prepare = e.commands[0];
    e = reduce(def, e.state, { ...base('r2'), kind: 'signal', signal: 'approved', payload: 1 }); // early: buffered
    e = reduce(def, e.state, { ...ok(prepare), runId: 'r2' });
    expect(e.state!.steps.approve).toMatchObject({ status: 'completed', output: 1 });
  });

  it('cancel ends a run; retry restarts a failed run from its failed step', () => {
    const def = workflow('two', 1)
      .task('a', { type: 'a' })
      .task('b', { type: 'b', retry: { maxAttempts: 1 } })
      .build();
    let d = reduce(def, undefined, start(def));
    d = reduce(def, d.state, ok(d.commands[0]));
    d = reduce(def, d.state, fail(d.commands[0]));
    expect(d.state!.status).toBe('failed');
    d = reduce(def, d.state, { ...base(), kind: 'retry' });
    expect(d.commands).toMatchObject([{ stepId: 'b', attempt: 2, idempotencyKey: 'r1/b' }]);
    d = reduce(def, d.state, { ...base(), kind: 'cancel', reason: 'operator' });
    expect(d.state!.status).toBe('cancelled');
    expect(
      reduce(def, d.state, ok(d.commands[0] ?? ({ stepId: 'b', attempt: 2 } as CommandSpec))).ignored,
    ).toMatch(/cancelled/);
  });
});

/**
 * Property tests over simulated environments: a random interleaving of results (success, retryable and
 * non-retryable failures), late duplicates of earlier results, due timers and stale timers.
 */
describe('reducer invariants (property-based)', () => {
  const defs = [
    saga,
    workflow('fan', 1)
      .task('a', { type: 'a', compensate: { type: 'undo-a' }, retry: { maxAttempts: 3 } })
      .map('m', { type: 'm', items: () => [1, 2, 3], concurrency: 2, retry: { maxAttempts: 2 } })
      .task('z', { type: 'z', compensate: { type: 'undo-z' } })
      .task('last', { type: 'last', retry: { maxAttempts: 2 } })
      .build(),
  ];
  type Choice = { pick: number; outcome: 'ok' | 'retryable' | 'fatal' | 'dup' | 'timer' | 'stale-timer' };
  const choices = fc.array(
    fc.record({
      pick: fc.nat(),
      outcome: fc.constantFrom<Choice['outcome']>(
        'ok',
        'ok',
        'ok',
        'retryable',
        'fatal',
        'dup',
        'timer',
        'stale-timer',
      ),
    }),
    { maxLength: 80 },
  );

  function simulate(def: WorkflowDefinition, script: Choice[]) {
    ids = 0;
    clock = 5_000_000;
    const inputs: WorkflowInput[] = [start(def)];
    let d = reduce(def, undefined, inputs[0]);
    const commands: CommandSpec[] = [...d.commands];
    let outstanding: CommandSpec[] = [...d.commands];
    const applied: WorkflowInput[] = [];
    const stale: Array<{ before: RunState; input: WorkflowInput; decision: Decision }> = [];
    for (const ch of script) {
      const s = d.state!;
      let input: WorkflowInput | undefined;
      if (ch.outcome === 'dup' && applied.length)
        input = { ...applied[ch.pick % applied.length], eventId: `dup${ch.pick}` };
      else if (ch.outcome === 'stale-timer')
        input = { ...base(), kind: 'timer-fired', timerId: `retry:nope:${ch.pick}` };
      else if (ch.outcome === 'timer') {
        const due = dueTimers(s, Number.MAX_SAFE_INTEGER);
        if (due.length) input = { ...base(), kind: 'timer-fired', timerId: due[ch.pick % due.length][0] };
      } else if (outstanding.length) {
        const c = outstanding[ch.pick % outstanding.length];
        input = ch.outcome === 'ok' ? ok(c) : fail(c, ch.outcome === 'retryable');
      }
      if (!input) continue;
      const before = s;
      d = reduce(def, s, input);
      inputs.push(input);
      if (d.ignored) stale.push({ before, input, decision: d });
      else if (input.kind !== 'timer-fired' || !input.timerId.startsWith('retry:nope')) applied.push(input);
      commands.push(...d.commands);
      const scheduled = new Set(
        Object.entries(d.state!.steps)
          .filter(([, st]) => st.status === 'scheduled')
          .map(([id, st]) => `${id}/${st.attempt}`),
      );
      outstanding = [...outstanding, ...d.commands].filter((c) => scheduled.has(`${c.stepId}/${c.attempt}`));
    }
    return { final: d.state!, inputs, commands, stale };
  }

  it('the simulated environments reach compensation, completion and failure (so the properties below are not vacuous)', () => {
    const statuses = new Set<string>();
    fc.sample(fc.tuple(fc.constantFrom(...defs), choices), 500).forEach(([def, script]) =>
      statuses.add(simulate(def, script).final.status),
    );
    expect([...statuses]).toEqual(
      expect.arrayContaining(['compensated', 'completed', 'failed', 'compensating']),
    );
  });

  it('a step attempt is scheduled at most once', () => {
    fc.assert(
      fc.property(fc.constantFrom(...defs), choices, (def, script) => {
        const { commands } = simulate(def, script);
        const attempts = commands.map((c) => `${c.stepId}/${c.attempt}`);
        return new Set(attempts).size === attempts.length;
      }),
      { numRuns: 300 },
    );
  });

  it('every attempt of one logical step carries one idempotency key, and no two steps share one', () => {
    fc.assert(
      fc.property(fc.constantFrom(...defs), choices, (def, script) => {
        const { commands } = simulate(def, script);
        const keyOf = new Map<string, string>();
        const stepOf = new Map<string, string>();
        for (const c of commands) {
          if ((keyOf.get(c.stepId) ?? c.idempotencyKey) !== c.idempotencyKey) return false;
          if ((stepOf.get(c.idempotencyKey) ?? c.stepId) !== c.stepId) return false;
          keyOf.set(c.stepId, c.idempotencyKey);
          stepOf.set(c.idempotencyKey, c.stepId);
        }
        return true;
      }),
      { numRuns: 300 },
    );
  });

  it('compensations run in reverse order of the completed steps they undo', () => {
    fc.assert(
      fc.property(fc.constantFrom(...defs), choices, (def, script) => {
        const { final, commands } = simulate(def, script);
        if (!final.compensation) return true;
        const order = commands
          .filter((c) => c.stepId.endsWith('.compensate'))
          .map((c) => c.stepId.replace('.compensate', ''));
        const firstSeen = order.filter((id, i) => order.indexOf(id) === i);
        const expected = [...final.compensation.queue].slice(0, firstSeen.length);
        // A step joins the queue when it completes, or when it fails for good with its effect uncertain.
        const last = new Map<string, number>();
        final.timeline.forEach((t, i) => {
          if (t.event === 'StepCompleted' || t.event === 'StepFailed') last.set(t.stepId!, i);
        });
        const completedOrder = [...final.compensation.queue].sort((a, b) => last.get(a)! - last.get(b)!);
        return (
          JSON.stringify(firstSeen) === JSON.stringify(expected) &&
          JSON.stringify([...final.compensation.queue].reverse()) === JSON.stringify(completedOrder)
        );
      }),
      { numRuns: 300 },
    );
  });

  it('a stale result or timer changes nothing', () => {
    fc.assert(
      fc.property(fc.constantFrom(...defs), choices, (def, script) => {
        const { stale } = simulate(def, script);
        return stale.every(
          ({ before, decision }) =>
            decision.state === before && decision.commands.length === 0 && decision.events.length === 0,
        );
      }),
      { numRuns: 300 },
    );
  });

  it('replaying the same inputs gives the same state', () => {
    fc.assert(
      fc.property(fc.constantFrom(...defs), choices, (def, script) => {
        const { final, inputs } = simulate(def, script);
        const replayed = run(def, inputs).state;
        expect(replayed).toEqual(final);
        return true;
      }),
      { numRuns: 200 },
    );
  });

  it('a batch applied in place (PendingRuns) decides as the pure reducer does and leaves the committed state as it was', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...defs),
        choices,
        fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1 }),
        (def, script, sizes) => {
          const { final, inputs } = simulate(def, script);
          const expected = inputs.map((_, i) => run(def, inputs.slice(0, i + 1)).decisions[i]);
          let committed: RunState | undefined;
          let at = 0;
          for (let b = 0; at < inputs.length; b++) {
            const before = committed && structuredClone(committed);
            const pending = new PendingRuns(() => committed);
            for (const input of inputs.slice(at, at + sizes[b % sizes.length])) {
              const d = pending.apply(def, input);
              const want = expected[at++];
              expect(d.ignored).toEqual(want.ignored);
              expect(d.commands).toEqual(want.commands);
              expect(d.events).toEqual(want.events);
            }
            expect(committed).toEqual(before);
            committed = pending.changed().get('r1') ?? committed;
          }
          expect(committed).toEqual(final);
          return true;
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('a batch applied in place (PendingRuns)', () => {
  const throwsOnSecond = workflow('boom', 1)
    .task('a', { type: 'a' })
    .task('b', {
      type: 'b',
      input: (c) => {
        if ((c.outputs.a as { fail?: boolean }).fail) throw new Error('mapping bug');
        return c.outputs.a;
      },
    })
    .build();

  it('a definition that throws leaves the run as it was before that input, and the batch goes on', () => {
    const s0 = reduce(throwsOnSecond, undefined, start(throwsOnSecond)).state!;
    const command = reduce(throwsOnSecond, undefined, start(throwsOnSecond)).commands[0];
    const pending = new PendingRuns(() => s0);
    const signal: WorkflowInput = { ...base(), kind: 'signal', signal: 'hello', payload: 1 };
    pending.apply(throwsOnSecond, signal);
    const afterSignal = structuredClone(pending.get('r1'));
    expect(() => pending.apply(throwsOnSecond, ok(command, { fail: true }))).toThrow('mapping bug');
    expect(pending.get('r1')).toEqual(afterSignal);
    const d = pending.apply(throwsOnSecond, ok(command, { fail: false }));
    expect(d.commands.map((c) => c.stepId)).toEqual(['b']);
    expect(pending.changed().get('r1')!.sequence).toBe(s0.sequence + 2);
    expect(s0.steps.a.status).toBe('scheduled'); // the committed state was not touched
  });

  it('undoLast takes back an applied input (its outputs could not be encoded)', () => {
    const s0 = reduce(throwsOnSecond, undefined, start(throwsOnSecond)).state!;
    const command = reduce(throwsOnSecond, undefined, start(throwsOnSecond)).commands[0];
    const pending = new PendingRuns(() => s0);
    pending.apply(throwsOnSecond, ok(command));
    expect(pending.get('r1')!.steps.a.status).toBe('completed');
    pending.undoLast('r1');
    expect(pending.get('r1')).toEqual(s0);
    expect(pending.changed().size).toBe(0);
  });
});

describe('step timings', () => {
  it('records when each step was first scheduled and when it completed (event time)', () => {
    clock = 10_000;
    let d = reduce(saga, undefined, start(saga));
    const t0 = clock;
    d = reduce(saga, d.state, ok(d.commands[0]));
    expect(d.state!.steps.reserve).toMatchObject({ startedAt: t0, endedAt: clock });
    d = reduce(saga, d.state, fail(d.commands[0]));
    d = reduce(saga, d.state, fire(d.state!, 'retry'));
    const retriedAt = clock;
    d = reduce(saga, d.state, ok(d.commands[0]));
    expect(d.state!.steps.charge.startedAt).toBeLessThan(retriedAt); // the first attempt's time, kept across retries
    expect(d.state!.steps.charge.endedAt).toBe(clock);
  });
});

describe('run retry and timeouts (review findings)', () => {
  it('retrying a run that failed in a map step schedules its items again under their own keys', () => {
    const def = workflow('m', 1)
      .map('each', { type: 'w', items: () => [1, 2], concurrency: 2, retry: { maxAttempts: 1 } })
      .build();
    let d = reduce(def, undefined, start(def));
    const [first] = d.commands;
    d = reduce(def, d.state, fail(first, false));
    expect(d.state!.status).toBe('failed');
    d = reduce(def, d.state, { ...base(), kind: 'retry' });
    expect(d.commands.map((c) => c.idempotencyKey)).toEqual(['r1/each[0]', 'r1/each[1]']);
    expect(reduce(def, d.state, ok(first)).ignored).toMatch(/stale/); // the first run's late result
  });

  it('retrying from before a choice runs the chosen branch once; retrying from a choice goes on at once', () => {
    const def = workflow('c', 1)
      .task('a', { type: 'a', retry: { maxAttempts: 1 } })
      .choice('ch', [{ when: () => true, steps: (b) => b.task('b1', { type: 'b' }) }])
      .task('z', { type: 'z', retry: { maxAttempts: 1 } })
      .build();
    let d = reduce(def, undefined, start(def));
    d = reduce(def, d.state, ok(d.commands[0]));
    d = reduce(def, d.state, ok(d.commands[0]));
    d = reduce(def, d.state, fail(d.commands[0], false));
    expect(d.state!.plan).toEqual(['a', 'ch', 'b1', 'z']);
    let r = reduce(def, d.state, { ...base(), kind: 'retry', fromStepId: 'a' });
    expect(r.commands.map((c) => c.stepId)).toEqual(['a']);
    r = reduce(def, r.state, ok(r.commands[0]));
    expect(r.state!.plan).toEqual(['a', 'ch', 'b1', 'z']);
    const fromChoice = reduce(def, d.state, { ...base(), kind: 'retry', fromStepId: 'ch' });
    expect(fromChoice.commands.map((c) => c.idempotencyKey)).toEqual(['r1/b1#1']);
    expect(fromChoice.state!.plan).toEqual(['a', 'ch', 'b1', 'z']);
  });

  it('a run timeout during compensation does not cut the compensation short', () => {
    const def = workflow('t', 1)
      .task('a', { type: 'a', compensate: { type: 'undo-a' } })
      .task('b', { type: 'b', compensate: { type: 'undo-b' } })
      .task('c', { type: 'c', retry: { maxAttempts: 1 } })
      .timeout(60_000)
      .build();
    let d = reduce(def, undefined, start(def));
    d = reduce(def, d.state, ok(d.commands[0]));
    d = reduce(def, d.state, ok(d.commands[0]));
    d = reduce(def, d.state, fail(d.commands[0], false));
    expect(d.state!.status).toBe('compensating');
    expect(d.state!.timers['run-timeout']).toBeUndefined();
    d = reduce(def, d.state, ok(d.commands[0]));
    d = reduce(def, d.state, ok(d.commands[0]));
    expect(d.state!.status).toBe('compensated');
  });
});

describe('map items kept in segments', () => {
  const N = 3 * SEGMENT_ITEMS + 7;
  const big = workflow('big', 1)
    .map('each', { type: 'w', items: () => Array.from({ length: N }, (_, i) => i), concurrency: 40 })
    .build();

  it('a map over several segments fans in every output in item order, whatever the order results arrive in', () => {
    let committed = reduce(big, undefined, start(big)).state!;
    const outstanding = reduce(big, undefined, start(big)).commands;
    let seed = 7;
    while (outstanding.length) {
      // A batch of results in a shuffled order (a fixed LCG: the test is deterministic).
      const batch = outstanding.splice(0, 25).sort(() => ((seed = (seed * 48271) % 2147483647) % 3) - 1);
      const pending = new PendingRuns(() => committed);
      for (const c of batch) {
        const index = Number(/\[(\d+)\]/.exec(c.stepId)![1]);
        outstanding.push(...pending.apply(big, ok(c, index * 10)).commands);
      }
      committed = pending.changed().get('r1')!;
    }
    expect(committed.status).toBe('completed');
    expect(committed.steps.each.output).toEqual(Array.from({ length: N }, (_, i) => i * 10));
    expect(committed.steps.each.map!.segments).toHaveLength(4);
  });

  it('the flat view lists every item as a step, and a state of that older shape reads back the same', () => {
    let d = reduce(big, undefined, start(big));
    d = reduce(big, d.state, ok(d.commands[3], 'three'));
    d = reduce(big, d.state, fail(d.commands[0], false));
    const flat = flatRunState(d.state!);
    expect(flat.steps['each[3]']).toMatchObject({ status: 'completed', output: 'three' });
    expect(flat.steps['each[0]']).toMatchObject({ status: 'failed' });
    expect(flat.steps.each.map!.outputs![3]).toBe('three');
    expect(Object.keys(flat.steps).filter((id) => id.startsWith('each['))).toHaveLength(41);
    const older = structuredClone(flat);
    delete (older.steps.each.map as { segments?: unknown }).segments;
    expect(normalizeRunState(older)).toEqual(d.state);
  });

  it('a copy of a run shares its segments, and changing the copy leaves the original as it was', () => {
    const d = reduce(big, undefined, start(big));
    const before = structuredClone(d.state!);
    const copy = copyRunState(d.state!);
    expect(copy.steps.each.map!.segments[0]).toBe(d.state!.steps.each.map!.segments[0]);
    const pending = new PendingRuns(() => d.state);
    pending.apply(big, ok(d.commands[0]));
    expect(d.state).toEqual(before);
  });

  it('a copy of a run is deep in everything but outputs, input, segments and the elements the reducer only adds, replaces or removes whole (timeline entries, timers, signal payloads): changes stay in the copy', () => {
    const d = reduce(big, undefined, start(big));
    const s = d.state!;
    s.signals = { approved: { by: ['ann'] }, odd: JSON.parse('{"__proto__": {"admin": true}, "n": 1}') };
    s.timers['t'] = { dueAt: 1, purpose: 'wait', stepId: undefined };
    s.error = { stepId: 'each', errorClass: 'E', message: 'm', retryable: false, code: null };
    const before = structuredClone(s);
    const copy = copyRunState(s);
    expect(copy).toEqual(s);
    expect(Object.keys(copy.timers['t'])).toEqual(Object.keys(s.timers['t'])); // undefined-valued keys kept
    expect(JSON.stringify(copy.signals.odd)).toBe('{"__proto__":{"admin":true},"n":1}'); // a key, not a prototype
    expect((copy.signals.odd as { admin?: boolean }).admin).toBeUndefined();
    // Shared: the elements themselves.
    expect(copy.timeline[0]).toBe(s.timeline[0]);
    expect(copy.timers['t']).toBe(s.timers['t']);
    expect(copy.signals.approved).toBe(s.signals.approved);
    // Changed the way the reducer changes them: added, replaced, removed whole; and the deep parts changed inside.
    delete copy.signals.approved;
    copy.signals.late = 1;
    copy.timers['t'] = { ...copy.timers['t'], dueAt: 2 };
    delete copy.timers['step-timeout'];
    copy.timeline.push({ at: 9, event: 'changed' });
    copy.timeline.splice(0, 1);
    copy.error!.message = 'changed';
    copy.plan.push('extra');
    copy.compensable.push('each');
    (copy.requestIds ??= []).push('req');
    copy.steps.each.attempt = 99;
    expect(s).toEqual(before);
  });
});

describe('snapshots of a run with map items', () => {
  it('a segment key names its run; a run id is not a segment key', () => {
    expect(runOfSegmentKey(segmentKey('run-1', 'each', 3))).toBe('run-1');
    expect(runOfSegmentKey('run-1')).toBeUndefined();
    expect(runOfSegmentKey('__barrier__/2')).toBeUndefined();
  });

  const big = workflow('big', 1)
    .map('each', { type: 'w', items: () => Array.from({ length: 1000 }, (_, i) => i), concurrency: 8 })
    .build();
  const read = (parts: SnapshotParts, segments: Map<string, ItemSegment>) => {
    parts.segments.forEach((p) => segments.set(`${p.mapId}/${p.index}`, JSON.parse(p.text)));
    return assembleRunState(JSON.parse(parts.core), (mapId, k) => segments.get(`${mapId}/${k}`));
  };

  it('a snapshot after one item result writes the core and only the segment that changed, and reads back whole', () => {
    const d = reduce(big, undefined, start(big));
    const segments = new Map<string, ItemSegment>();
    const first = snapshotParts(d.state!, undefined);
    expect(first.segments.map((p) => p.index)).toEqual([0, 1, 2, 3]);
    expect(read(first, segments)).toEqual(d.state);

    const pending = new PendingRuns(() => d.state);
    pending.apply(big, ok(d.commands[2], 'two'));
    const next = pending.changed().get('r1')!;
    const second = snapshotParts(next, d.state);
    expect(second.segments.map((p) => p.index)).toEqual([0]);
    expect(second.core.length).toBeLessThan(first.core.length + 2_000); // no item in the core
    expect(read(second, segments)).toEqual(next);
  });
});

describe('cancel and terminate', () => {
  const twoDone = () => {
    let d = reduce(saga, undefined, start(saga, { amount: 5 }));
    d = reduce(saga, d.state, ok(d.commands[0])); // reserve
    d = reduce(saga, d.state, ok(d.commands[0])); // charge; ship is scheduled
    return d;
  };

  it('cancel compensates the completed steps (and the outstanding one) in reverse order, then ends cancelled', () => {
    let d = twoDone();
    d = reduce(saga, d.state, { ...base(), kind: 'cancel', reason: 'customer asked' });
    expect(d.state!.status).toBe('compensating');
    expect(d.commands.map((c) => c.stepId)).toEqual(['charge.compensate']);
    d = reduce(saga, d.state, ok(d.commands[0]));
    expect(d.commands.map((c) => c.stepId)).toEqual(['reserve.compensate']);
    d = reduce(saga, d.state, ok(d.commands[0]));
    expect(d.state!.status).toBe('cancelled');
    expect(d.events.at(-1)).toEqual({ type: 'RunCancelled', reason: 'customer asked', terminated: false });
    expect(d.state!.error).toBeUndefined();
  });

  it('terminate stops at once: no compensation, recorded as terminated; it also cuts a compensation short', () => {
    let d = twoDone();
    const t = reduce(saga, d.state, { ...base(), kind: 'cancel', reason: 'stop now', terminate: true });
    expect(t.commands).toEqual([]);
    expect(t.state!.status).toBe('cancelled');
    expect(t.events).toEqual([{ type: 'RunCancelled', reason: 'stop now', terminated: true }]);
    expect(t.state!.timeline.at(-1)!.event).toBe('RunTerminated');

    d = reduce(saga, d.state, { ...base(), kind: 'cancel', reason: 'first' });
    expect(reduce(saga, d.state, { ...base(), kind: 'cancel', reason: 'again' }).ignored).toMatch(
      /compensating/,
    );
    const cut = reduce(saga, d.state, { ...base(), kind: 'cancel', reason: 'enough', terminate: true });
    expect(cut.state!.status).toBe('cancelled');
    expect(cut.state!.timers).toEqual({});
  });

  it('cancel of a run with nothing to compensate ends it cancelled at once; an outstanding compensable step is compensated', () => {
    const plain = workflow('plain', 1).task('a', { type: 'a' }).task('b', { type: 'b' }).build();
    const d = reduce(plain, undefined, start(plain));
    const c = reduce(plain, d.state, { ...base(), kind: 'cancel', reason: 'not needed' });
    const s = reduce(saga, undefined, start(saga));
    const uncertain = reduce(saga, s.state, { ...base(), kind: 'cancel', reason: 'reserve may have run' });
    expect(uncertain.commands.map((x) => x.stepId)).toEqual(['reserve.compensate']);
    expect(c.state!.status).toBe('cancelled');
    expect(c.events).toEqual([{ type: 'RunCancelled', reason: 'not needed', terminated: false }]);
  });
});

/** Defects found by review of the segmented map state (each test fails without its fix). */
describe('map segments: upgrades, retries and definitions that change their arguments', () => {
  it('the first snapshot of a run restored from an older-shape snapshot writes every segment (none is lost on re-read)', () => {
    const N = 600;
    const def = workflow('up', 1)
      .map('m', { type: 'm', items: () => Array.from({ length: N }, (_, i) => i), concurrency: N })
      .build();
    let d = reduce(def, undefined, start(def));
    for (let i = 0; i < N - 1; i++)
      d = reduce(def, d.state, ok(d.commands[i] ?? ({ stepId: `m[${i}]`, attempt: 1 } as CommandSpec), i));
    const older = flatRunState(d.state!); // items among the steps, outputs in map.outputs: what older versions wrote
    delete (older.steps.m.map as { segments?: unknown }).segments;
    const restored = assembleRunState(JSON.parse(JSON.stringify(older)), () => undefined);
    const pending = new PendingRuns(() => restored);
    pending.apply(def, { ...base(), kind: 'signal', signal: 'noise', payload: 1 });
    const next = pending.changed().get('r1')!;
    const parts = snapshotParts(next, restored);
    const segments = new Map(
      parts.segments.map((p) => [`${p.mapId}/${p.index}`, JSON.parse(p.text) as ItemSegment]),
    );
    const reread = assembleRunState(JSON.parse(parts.core), (m, k) => segments.get(`${m}/${k}`));
    expect(flatRunState(reread)).toEqual(flatRunState(next));
  });

  it('a run retry that shrinks a map and then grows it again gives each item its own key (no completed key reused)', () => {
    const def = workflow('shrink', 1)
      .task('fetch', { type: 'fetch' })
      .map('m', {
        type: 'm',
        items: (c) => (c.outputs.fetch as { orders: string[] }).orders,
        concurrency: 10,
      })
      .task('z', { type: 'z' })
      .build();
    const seen: string[] = [];
    let d = reduce(def, undefined, start(def));
    const step = (i: WorkflowInput) => {
      d = reduce(def, d.state, i);
      d.commands.forEach((c) => seen.push(`${c.stepId}|${c.idempotencyKey}|${c.attempt}`));
    };
    step(ok(d.commands[0], { orders: ['A', 'B', 'C'] }));
    for (const c of [...d.commands]) step(ok(c, c.stepId));
    step(fail(d.commands[0], false)); // z fails for good
    step({ ...base(), kind: 'retry', fromStepId: 'fetch' });
    step(ok(d.commands[0], { orders: ['A'] }));
    step(ok(d.commands[0], 'A'));
    step(fail(d.commands[0], false));
    step({ ...base(), kind: 'retry', fromStepId: 'fetch' });
    step(ok(d.commands[0], { orders: ['A', 'X', 'Y'] }));
    const m1 = seen.filter((k) => k.startsWith('m[1]|'));
    expect(new Set(m1).size).toBe(m1.length);
    expect(m1.at(-1)).toBe('m[1]|r1/m[1]#1|2'); // B completed under r1/m[1]: X runs under a new generation
  });

  it("an older-shape run retried from before its map keeps its items' generations after the upgrade", () => {
    const def = workflow('legacy', 1)
      .task('a', { type: 'a' })
      .map('m', { type: 'm', items: () => [0, 1], concurrency: 2 })
      .task('z', { type: 'z' })
      .build();
    let d = reduce(def, undefined, start(def));
    d = reduce(def, d.state, ok(d.commands[0]));
    const [i0, i1] = d.commands;
    d = reduce(def, d.state, ok(i0, 0));
    d = reduce(def, d.state, ok(i1, 1));
    d = reduce(def, d.state, fail(d.commands[0], false));
    d = reduce(def, d.state, { ...base(), kind: 'retry', fromStepId: 'a' });
    const a = d.commands[0];
    const expected = reduce(def, d.state, ok(a)).commands.map((c) => c.idempotencyKey);
    expect(expected).toEqual(['r1/m[0]#1', 'r1/m[1]#1']);
    // What an older version's retry left: the map step reset without its progress, its items among the steps.
    const older = flatRunState(d.state!);
    older.steps.m = { status: 'failed', attempt: 1, generation: 1 };
    const restored = normalizeRunState(JSON.parse(JSON.stringify(older)));
    expect(reduce(def, restored, ok(a)).commands.map((c) => c.idempotencyKey)).toEqual(expected);
  });

  it('a definition function that changes its arguments fails that input and leaves the committed state as it was', () => {
    const def = workflow('mutates', 1)
      .task('quote', { type: 'quote' })
      .task('charge', {
        type: 'charge',
        input: (c) => {
          (c.outputs.quote as { amount: number }).amount *= 100;
          return c.outputs.quote;
        },
      })
      .build();
    const d = reduce(def, undefined, start(def));
    const committed = d.state!;
    const before = structuredClone(committed);
    const result = ok(d.commands[0], { amount: 12.5 });
    for (let i = 0; i < 2; i++) {
      const pending = new PendingRuns(() => committed);
      expect(() => pending.apply(def, result)).toThrow(TypeError);
      expect(committed).toEqual(before);
    }
    expect(() => reduce(def, committed, result)).toThrow(TypeError); // the pure path refuses it the same way
  });
});
