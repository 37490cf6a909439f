import type { AvroSchema } from '@keyflow/schemas';
import { PII_MASK } from '@keyflow/workflow';
import { avroPiiMarks, avroType, marksAny, maskAvroPii } from '../../src';

type AvroSchemaJson = AvroSchema;

/** A customer event as a team would add it to the catalog: PII on fields, on a type, in a nested record and map. */
const address = {
  type: 'record',
  name: 'Address',
  fields: [
    { name: 'street', type: 'string', pii: true },
    { name: 'country', type: 'string' },
  ],
};
const signedUp = {
  type: 'record',
  name: 'CustomerSignedUp',
  namespace: 'dev.keyflow.events',
  fields: [
    { name: 'customerId', type: 'string' },
    { name: 'email', type: 'string', pii: true },
    { name: 'phone', type: ['null', { type: 'string', pii: true }], default: null },
    { name: 'home', type: address },
    { name: 'previous', type: { type: 'array', items: 'Address' } },
    { name: 'notes', type: { type: 'map', values: { type: 'string', pii: true } } },
    { name: 'tier', type: { type: 'enum', name: 'Tier', symbols: ['FREE', 'PAID'] } },
  ],
};
const cancelled = {
  type: 'record',
  name: 'CustomerLeft',
  namespace: 'dev.keyflow.events',
  fields: [
    { name: 'customerId', type: 'string' },
    { name: 'reason', type: 'string', pii: true },
  ],
};

/** The datum as the codec decodes it (its avsc type options). */
function decoded(schema: AvroSchemaJson, value: unknown, branch?: string): unknown {
  const type = avroType(schema);
  const datum = branch ? { [branch]: value } : value;
  const out = type.fromBuffer(type.toBuffer(datum)) as Record<string, unknown>;
  return branch ? out[branch] : out;
}

const customer = {
  customerId: 'c-1',
  email: 'ada@example.org',
  phone: '+44 20 7946 0000',
  home: { street: '12 Analytical Row', country: 'GB' },
  previous: [{ street: '1 Engine Lane', country: 'GB' }],
  notes: { support: 'called about her address' },
  tier: 'PAID',
};

describe('Avro PII masking (fields marked "pii": true in the .avsc)', () => {
  it('masks every marked value (field, type in a union, nested record, array items by reference, a map of marked values) and keeps the rest', () => {
    const masked = maskAvroPii(signedUp, decoded(signedUp, customer));
    expect(masked).toEqual({
      customerId: 'c-1',
      email: PII_MASK,
      phone: PII_MASK,
      home: { street: PII_MASK, country: 'GB' },
      previous: [{ street: PII_MASK, country: 'GB' }],
      notes: PII_MASK, // an anonymous marked type inside a field's type masks the field's values whole
      tier: 'PAID',
    });
    expect(JSON.stringify(masked)).not.toMatch(/ada@|Analytical|Engine Lane|7946|address/);
  });

  it('a null in a marked optional field stays null; the value given is not changed', () => {
    const value = decoded(signedUp, { ...customer, phone: null });
    const copy = JSON.parse(JSON.stringify(value));
    expect((maskAvroPii(signedUp, value) as { phone: unknown }).phone).toBeNull();
    expect(JSON.parse(JSON.stringify(value))).toEqual(copy);
  });

  it('picks the event of a topic union by its full name; a name not in the union is masked whole', () => {
    const topic = [signedUp, cancelled];
    const left = decoded(
      topic,
      { customerId: 'c-2', reason: 'moved to 3 Byron St' },
      'dev.keyflow.events.CustomerLeft',
    );
    expect(maskAvroPii(topic, left, 'dev.keyflow.events.CustomerLeft')).toEqual({
      customerId: 'c-2',
      reason: PII_MASK,
    });
    expect(maskAvroPii(topic, left, 'dev.keyflow.events.Other')).toBe(PII_MASK);
  });

  it('a wrapped union value ({ branch: value }) is masked inside its branch', () => {
    const schema = {
      type: 'record',
      name: 'Contact',
      fields: [
        {
          name: 'how',
          type: [
            address,
            { type: 'record', name: 'Mail', fields: [{ name: 'to', type: 'string', pii: true }] },
          ],
        },
      ],
    };
    const value = decoded(schema, { how: { Mail: { to: 'ada@example.org' } } });
    expect(value).toEqual({ how: { Mail: { to: 'ada@example.org' } } });
    expect(maskAvroPii(schema, value)).toEqual({ how: { Mail: { to: PII_MASK } } });
  });

  it('a schema that marks nothing gives the value back as it is; avroPiiMarks tells the two apart', () => {
    const plain = { type: 'record', name: 'P', fields: [{ name: 'a', type: 'string' }] };
    const value = { a: 'x' };
    expect(maskAvroPii(plain, value)).toBe(value);
    expect(marksAny(avroPiiMarks(plain))).toBe(false);
    expect(marksAny(avroPiiMarks(signedUp))).toBe(true);
  });

  it('fails closed: a value nested deeper than the walk goes is masked whole', () => {
    const list: AvroSchemaJson = {
      type: 'record',
      name: 'Node',
      fields: [
        { name: 'secret', type: 'string', pii: true },
        { name: 'next', type: ['null', 'Node'], default: null },
      ],
    };
    let deep: unknown = null;
    for (let i = 0; i < 100; i++) deep = { secret: `s${i}`, next: deep };
    expect(JSON.stringify(maskAvroPii(list, deep))).not.toMatch(/"s\d+"/);
  });

  describe('unions as avsc decodes them (wrapUnions auto): no marked value gets through', () => {
    const contact = {
      type: 'record',
      name: 'C',
      fields: [{ name: 'email', type: 'string', pii: true }],
    };
    const cases: Array<[string, AvroSchemaJson, unknown]> = [
      ['a record with one field in an optional union', ['null', contact], { email: 'ada@example.org' }],
      [
        'a map of one entry in an optional union',
        ['null', { type: 'map', values: { type: 'string', pii: true } }],
        { only: 'ada@example.org' },
      ],
      [
        'bytes marked in an optional union',
        ['null', { type: 'bytes', pii: true }],
        Buffer.from('ada@example.org'),
      ],
      [
        'a fixed type marked, referenced from a union',
        ['null', { type: 'fixed', name: 'Ssn', size: 15, pii: true }],
        Buffer.from('ada@example.org'),
      ],
      [
        'a wrapped union of primitives, the long marked',
        ['null', 'int', { type: 'long', pii: true }],
        { long: 123456 },
      ],
      [
        'a wrapped union of an enum and a marked string',
        [
          { type: 'enum', name: 'E', symbols: ['A'] },
          { type: 'string', pii: true },
        ],
        { string: 'ada@example.org' },
      ],
    ];
    it.each(cases)('%s', (_, fieldType, value) => {
      const schema = { type: 'record', name: 'Holder', fields: [{ name: 'f', type: fieldType }] };
      const datum = decoded(schema, { f: value }) as { f: unknown };
      const masked = maskAvroPii(schema, datum);
      expect(JSON.stringify(masked)).not.toMatch(/ada@|123456|"data"/);
      expect(masked).not.toEqual(datum);
    });

    it('two types of one short name in two namespaces: the reference resolves in its own namespace', () => {
      const schema = {
        type: 'record',
        name: 'R',
        namespace: 'a',
        fields: [
          {
            name: 'p',
            type: { type: 'record', name: 'X', fields: [{ name: 'email', type: 'string', pii: true }] },
          },
          {
            name: 'q',
            type: { type: 'record', name: 'X', namespace: 'b', fields: [{ name: 'email', type: 'string' }] },
          },
          { name: 'r', type: 'X' },
        ],
      };
      const value = decoded(schema, { p: { email: 'e1' }, q: { email: 'e2' }, r: { email: 'e3' } });
      expect(maskAvroPii(schema, value)).toEqual({
        p: { email: PII_MASK },
        q: { email: 'e2' },
        r: { email: PII_MASK },
      });
    });
  });
});
