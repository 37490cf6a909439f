import {
  checkTaskOutput,
  defineTask,
  parseTaskInput,
  runInputIssues,
  TaskContractError,
  workflow,
  z,
  type MapStep,
  type TaskStep,
} from '../../src';

const charge = defineTask({
  type: 'payment.charge',
  input: z.object({ amount: z.number().positive(), currency: z.string().default('EUR') }),
  output: z.object({ paymentId: z.string() }),
});
const refund = defineTask({
  type: 'payment.refund',
  input: z.object({ input: z.object({ amount: z.number() }), output: z.unknown() }),
  output: z.object({ refunded: z.boolean() }),
});

describe('task contracts', () => {
  it("a command's input is parsed: defaults filled in, unknown keys dropped", () => {
    expect(parseTaskInput(charge, { amount: 5, extra: true })).toEqual({ amount: 5, currency: 'EUR' });
  });

  it('an input that breaks the contract is a non-retryable INPUT_SCHEMA error naming each path, never the value', () => {
    let err: unknown;
    try {
      parseTaskInput(charge, { amount: -3, currency: 4_111_111_111 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskContractError);
    const e = err as TaskContractError;
    expect(e).toMatchObject({ code: 'INPUT_SCHEMA', retryable: false, taskType: 'payment.charge' });
    expect(e.issues.map((i) => i.path)).toEqual(['amount', 'currency']);
    expect(e.message).toMatch(
      /^input of task payment\.charge does not match its contract: amount: .*; currency: /,
    );
    expect(e.message).not.toContain('4111111111');
  });

  it("a handler's output is checked and passed on exactly as returned", () => {
    const out = { paymentId: 'p-1', note: 'kept' };
    expect(checkTaskOutput(charge, out)).toBe(out);
    expect(() => checkTaskOutput(charge, { paymentId: 7 })).toThrow(
      expect.objectContaining({ code: 'OUTPUT_SCHEMA', retryable: false }),
    );
  });

  it('a task type must be a legal topic suffix', () => {
    for (const type of ['', 'has space', 'a/b', 'x'.repeat(201)])
      expect(() => defineTask({ type, input: z.unknown(), output: z.unknown() })).toThrow(
        expect.objectContaining({ code: 'INVALID_CONTRACT' }),
      );
  });
});

describe('typed workflow definitions', () => {
  it("a contract step's commands go to its type, its compensation to the undoing contract's type", () => {
    const def = workflow('pay', 1, { input: z.object({ amount: z.number() }) })
      .task('charge', charge, { input: (c) => ({ amount: c.input.amount }), compensate: { task: refund } })
      .build();
    const step = def.stepIndex.get('charge') as TaskStep;
    expect(step.type).toBe('payment.charge');
    expect(step.compensate?.type).toBe('payment.refund');
    const ctx = {
      runId: 'r',
      businessKey: 'b',
      input: { amount: 9 },
      outputs: { charge: { paymentId: 'p' } },
    };
    expect(step.input(ctx)).toEqual({ amount: 9 });
    // The default compensation input: the step's input and output.
    expect(step.compensate!.input(ctx)).toEqual({ input: { amount: 9 }, output: { paymentId: 'p' } });
  });

  it("a contract map step maps each item to the contract's input and aggregates typed outputs", () => {
    const def = workflow('fan', 1)
      .map('each', charge, {
        items: () => [1, 2, 3],
        input: (n) => ({ amount: n }),
        aggregate: (outs) => outs.map((o) => o.paymentId).join(','),
      })
      .build();
    const step = def.stepIndex.get('each') as MapStep;
    expect(step.type).toBe('payment.charge');
    const ctx = { runId: 'r', businessKey: 'b', input: {}, outputs: {} };
    expect(step.items(ctx).map((item, i) => step.input(item, i, ctx))).toEqual([
      { amount: 1 },
      { amount: 2 },
      { amount: 3 },
    ]);
    expect(step.aggregate([{ paymentId: 'a' }, { paymentId: 'b' }])).toBe('a,b');
  });

  it('a run input is checked against the workflow input schema and never rewritten', () => {
    const def = workflow('pay', 1, { input: z.object({ amount: z.number(), note: z.string().default('-') }) })
      .task('charge', charge, { input: (c) => ({ amount: c.input.amount }) })
      .build();
    expect(runInputIssues(def, { amount: 'x' })).toEqual([
      { path: 'amount', message: expect.stringContaining('expected number') },
    ]);
    const input = { amount: 1 };
    expect(runInputIssues(def, input)).toEqual([]);
    expect(input).toEqual({ amount: 1 });
    expect(runInputIssues(workflow('untyped', 1).task('t', { type: 'x' }).build(), 'anything')).toEqual([]);
  });
});
