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
});
