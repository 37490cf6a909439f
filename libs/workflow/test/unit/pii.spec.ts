import { defineTask, maskPii, maskRunView, pii, PII_MASK, workflow, z } from '../../src';

const email = pii(z.email());
const customer = z.object({
  name: z.string(),
  email,
  contacts: z.array(z.object({ email, kind: z.string() })),
  cards: z.record(z.string(), z.object({ number: pii(z.string()), brand: z.string() })),
  either: z.union([z.object({ phone: pii(z.string()) }), z.string()]),
  optional: email.optional(),
});

describe('PII masking driven by the schemas', () => {
  it('masks every marked field, at any depth, and leaves the rest as it is', () => {
    const value = {
      name: 'Ada',
      email: 'ada@example.com',
      contacts: [{ email: 'b@example.com', kind: 'work' }],
      cards: { main: { number: '4111111111111111', brand: 'visa' } },
      either: { phone: '+33 1 23 45 67 89' },
      optional: 'c@example.com',
      unknownField: 'kept',
    };
    const masked = maskPii(customer, value);
    expect(masked).toEqual({
      name: 'Ada',
      email: PII_MASK,
      contacts: [{ email: PII_MASK, kind: 'work' }],
      cards: { main: { number: PII_MASK, brand: 'visa' } },
      either: { phone: PII_MASK },
      optional: PII_MASK,
      unknownField: 'kept',
    });
    // The data itself is not changed.
    expect(value.email).toBe('ada@example.com');
    expect(JSON.stringify(masked)).not.toMatch(/example\.com|4111|\+33/);
  });

  it('returns the value itself when nothing is marked or no schema is known', () => {
    const v = { a: 1 };
    expect(maskPii(z.object({ a: z.number() }), v)).toBe(v);
    expect(maskPii(undefined, v)).toBe(v);
  });

  it("a run view masks the run input by the workflow's schema and outputs by each step's contract", () => {
    const lookup = defineTask({
      type: 'crm.lookup',
      input: z.object({ email: z.string() }),
      output: z.object({ customerId: z.string(), phone: pii(z.string()) }),
    });
    const def = workflow('crm', 1, { input: z.object({ email }) })
      .task('lookup', lookup, { input: (c) => ({ email: c.input.email }) })
      .map('each', lookup, { items: () => [{ email: 'x' }] })
      .build();
    const view = maskRunView(def, {
      input: { email: 'ada@example.com' },
      steps: {
        lookup: { output: { customerId: 'c1', phone: '555-0100' } },
        each: { output: [{ customerId: 'c2', phone: '555-0101' }] },
        'each[0]': { output: { customerId: 'c2', phone: '555-0101' } },
      },
    });
    expect(view).toEqual({
      input: { email: PII_MASK },
      steps: {
        lookup: { output: { customerId: 'c1', phone: PII_MASK } },
        each: { output: [{ customerId: 'c2', phone: PII_MASK }] },
        'each[0]': { output: { customerId: 'c2', phone: PII_MASK } },
      },
    });
  });

  it('the mark survives the checks chained after it, and a pipe marks by either side', () => {
    const chained = z.object({
      a: pii(z.email()).max(100),
      b: pii(z.string()).min(1).trim(),
      c: pii(z.string()).refine(() => true),
      d: pii(z.number()).int(),
      e: z.string().pipe(pii(z.string())),
    });
    expect(maskPii(chained, { a: 'a@b.co', b: 'x', c: 'y', d: 7, e: 'z' })).toEqual({
      a: PII_MASK,
      b: PII_MASK,
      c: PII_MASK,
      d: PII_MASK,
      e: PII_MASK,
    });
  });

  it("a record's keys are masked when its key schema is marked", () => {
    const byEmail = z.record(pii(z.string()), z.object({ visits: z.number() }));
    expect(maskPii(byEmail, { 'ada@example.com': { visits: 3 } })).toEqual({
      [`${PII_MASK}#0`]: { visits: 3 },
    });
  });

  it('fails closed: a value nested deeper than the walk goes is masked whole', () => {
    type Tree = { email: string; child?: Tree };
    const tree: z.ZodType<Tree> = z.lazy(() => z.object({ email: pii(z.string()), child: tree.optional() }));
    let deep: Tree = { email: 'leaf@example.com' };
    for (let i = 0; i < 100; i++) deep = { email: `n${i}@example.com`, child: deep };
    expect(JSON.stringify(maskPii(tree, deep))).not.toMatch(/@example\.com/);
  });

  it("a run view masks a map's item outputs in its progress and the default run output step by step; a custom output of a workflow that marks PII is masked whole", () => {
    const lookup = defineTask({
      type: 'crm.lookup',
      input: z.object({ email: z.string() }),
      output: z.object({ customerId: z.string(), phone: pii(z.string()) }),
    });
    const byDefault = workflow('crm', 1)
      .map('each', lookup, { items: () => [{ email: 'x' }] })
      .build();
    const item = { customerId: 'c', phone: '555-0100' };
    const masked = { customerId: 'c', phone: PII_MASK };
    expect(
      maskRunView(byDefault, {
        output: { each: [item] },
        steps: { each: { output: [item], map: { outputs: [item] } } },
      }),
    ).toEqual({
      output: { each: [masked] },
      steps: { each: { output: [masked], map: { outputs: [masked] } } },
    });
    const custom = workflow('crm', 2)
      .map('each', lookup, { items: () => [{ email: 'x' }] })
      .output((c) => c.outputs.each[0])
      .build();
    expect(maskRunView(custom, { output: item, steps: {} }).output).toBe(PII_MASK);
  });
});
