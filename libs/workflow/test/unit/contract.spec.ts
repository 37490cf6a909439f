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

  it('a contract whose schemas JSON cannot carry (a Date, a bigint) is refused when it is defined', () => {
    for (const input of [z.object({ at: z.date() }), z.object({ n: z.bigint() })])
      expect(() => defineTask({ type: 't', input, output: z.unknown() })).toThrow(
        expect.objectContaining({
          code: 'INVALID_CONTRACT',
          message: expect.stringContaining('input schema'),
        }),
      );
    expect(() => defineTask({ type: 't', input: z.unknown(), output: z.date() })).toThrow(/output schema/);
  });

  it('an output is checked as JSON will carry it to later steps', () => {
    const stamped = defineTask({ type: 't', input: z.unknown(), output: z.object({ n: z.number() }) });
    // NaN is published as null: the check sees null, not a number.
    expect(() => checkTaskOutput(stamped, { n: Number.NaN })).toThrow(
      expect.objectContaining({ code: 'OUTPUT_SCHEMA' }),
    );
  });

  it('a schema that throws, or is async, fails the check with an issue instead of throwing', () => {
    const throwing = z.string().transform((v) => JSON.parse(v) as unknown);
    expect(runInputIssues({ inputSchema: throwing }, '{')).toEqual([
      { path: '(root)', message: expect.stringContaining('the schema threw') },
    ]);
    const asyncRefine = z.string().refine(async () => true);
    expect(runInputIssues({ inputSchema: asyncRefine }, 'x')).toHaveLength(1);
    const contract = defineTask({
      type: 't',
      input: z.object({ a: z.string() }).refine(() => {
        throw new Error('boom');
      }),
      output: z.unknown(),
    });
    expect(() => parseTaskInput(contract, { a: 'x' })).toThrow(
      expect.objectContaining({ code: 'INPUT_SCHEMA' }),
    );
  });

  it('an unexpected key is counted, never named (a key may be data)', () => {
    const strict = defineTask({ type: 't', input: z.strictObject({ a: z.string() }), output: z.unknown() });
    let err: TaskContractError | undefined;
    try {
      parseTaskInput(strict, { a: 'x', 'ada@example.com': 1 });
    } catch (e) {
      err = e as TaskContractError;
    }
    expect(err?.issues).toEqual([{ path: '(root)', message: '1 unrecognized key(s)' }]);
    expect(err?.message).not.toContain('ada@example.com');
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
