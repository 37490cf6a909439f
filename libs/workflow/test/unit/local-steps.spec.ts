import {
  defineTask,
  idempotencyKeyOf,
  LOCAL_STEP_TIMEOUT_GRACE_MS,
  LOCAL_TIMEOUT_MS,
  localStepTypes,
  reduce,
  workflow,
  z,
  type CommandSpec,
  type RunState,
  type TaskStep,
  type WorkflowInput,
} from '../../src';

/** Local steps (`.local`): scheduled as task steps, their commands marked local (never produced to a task topic). */
let clock = 5_000_000;
let ids = 0;
const base = () => ({ eventId: `l${++ids}`, at: (clock += 10), runId: 'r1' });

const price = defineTask({
  type: 'local.price',
  input: z.object({ sku: z.string() }),
  output: z.object({ cents: z.number() }),
});
const tax = defineTask({
  type: 'local.tax',
  input: z.object({ cents: z.number() }),
  output: z.object({ total: z.number() }),
});

const def = workflow('quote', 1, { input: z.object({ sku: z.string() }) })
  .local('price', price)
  .local('tax', tax, {
    input: (c) => ({ cents: c.outputs.price.cents }),
    retry: { maxAttempts: 3, initialDelayMs: 10, maxDelayMs: 10 },
  })
  .task('ship', { type: 'remote.ship', input: (c) => ({ total: c.outputs.tax.total }) })
  .build();

const start: () => WorkflowInput = () => ({
  ...base(),
  kind: 'start',
  workflow: 'quote',
  version: 1,
  businessKey: 'q1',
  input: { sku: 'a' },
});
const ok = (c: CommandSpec, output: unknown): WorkflowInput => ({
  ...base(),
  kind: 'task-completed',
  stepId: c.stepId,
  attempt: c.attempt,
  output,
});
const fire = (s: RunState, purpose: string): WorkflowInput => ({
  ...base(),
  kind: 'timer-fired',
  timerId: Object.entries(s.timers).find(([, t]) => t.purpose === purpose)![0],
});

describe('local steps', () => {
  it('compile with a short default step timeout and are listed by task type', () => {
    const step = def.stepIndex.get('price') as TaskStep;
    expect(step).toMatchObject({
      kind: 'task',
      local: true,
      type: 'local.price',
      timeoutMs: LOCAL_TIMEOUT_MS,
    });
    expect(step.stepTimeoutMs).toBe(LOCAL_TIMEOUT_MS + LOCAL_STEP_TIMEOUT_GRACE_MS);
    expect((def.stepIndex.get('ship') as TaskStep).local).toBeUndefined();
    expect([...localStepTypes([def])]).toEqual(['local.price', 'local.tax']);
  });

  it('a local step is scheduled like a task step, its command marked local with the step idempotency key', () => {
    const d = reduce(def, undefined, start());
    expect(d.commands).toEqual([
      expect.objectContaining({
        stepId: 'price',
        taskType: 'local.price',
        local: true,
        idempotencyKey: idempotencyKeyOf('r1', 'price'),
        input: JSON.stringify({ sku: 'a' }),
      }),
    ]);
    expect(d.state!.steps.price).toMatchObject({ status: 'scheduled', dispatchedAt: clock });
    expect(Object.values(d.state!.timers)).toEqual([
      expect.objectContaining({
        purpose: 'step-timeout',
        dueAt: clock + LOCAL_TIMEOUT_MS + LOCAL_STEP_TIMEOUT_GRACE_MS,
      }),
    ]);
  });

  it('a remote step after local ones is a plain task command (no local mark)', () => {
    let d = reduce(def, undefined, start());
    d = reduce(def, d.state, ok(d.commands[0], { cents: 100 }));
    expect(d.commands[0]).toMatchObject({ stepId: 'tax', local: true, input: '{"cents":100}' });
    d = reduce(def, d.state, ok(d.commands[0], { total: 120 }));
    expect(d.commands).toEqual([expect.objectContaining({ stepId: 'ship', taskType: 'remote.ship' })]);
    expect(d.commands[0].local).toBeUndefined();
  });

  it("a local step's step timeout retries it locally (a crash between dispatch and result loses nothing)", () => {
    let d = reduce(def, undefined, start());
    d = reduce(def, d.state, ok(d.commands[0], { cents: 100 }));
    const first = d.commands[0];
    d = reduce(def, d.state, fire(d.state!, 'step-timeout'));
    expect(d.state!.steps.tax).toMatchObject({ status: 'waiting-retry' });
    d = reduce(def, d.state, fire(d.state!, 'retry'));
    expect(d.commands).toEqual([
      expect.objectContaining({
        stepId: 'tax',
        attempt: 2,
        local: true,
        idempotencyKey: first.idempotencyKey,
      }),
    ]);
  });
});
