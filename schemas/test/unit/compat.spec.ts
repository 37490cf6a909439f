import * as avsc from 'avsc';
import { checkHistory, readProblems, schemaSet, type AvroSchema } from '../../src';

const v1 = {
  type: 'record',
  name: 'Order',
  namespace: 'dev.keyflow.test',
  fields: [
    { name: 'id', type: 'string' },
    { name: 'amount', type: 'int' },
  ],
};
const withField = (field: Record<string, unknown>) => ({ ...v1, fields: [...v1.fields, field] });

describe('the compatibility gate', () => {
  it('accepts a new optional field with a default under BACKWARD_TRANSITIVE, both ways', () => {
    const v2 = withField({ name: 'note', type: ['null', 'string'], default: null });
    expect(checkHistory([v1, v2], 'BACKWARD_TRANSITIVE')).toEqual([]);
    expect(checkHistory([v1, v2], 'FULL_TRANSITIVE')).toEqual([]);
  });

  it('rejects a field added without a default, naming the field', () => {
    const v2 = withField({ name: 'currency', type: 'string' });
    const [violation] = checkHistory([v1, v2], 'BACKWARD_TRANSITIVE');
    expect(violation).toMatchObject({ version: 2, against: 1, direction: 'backward' });
    expect(violation.problems).toEqual([
      { path: 'Order.currency', reason: expect.stringContaining('has no default') },
    ]);
  });

  it('rejects a changed field type, naming the field and both types', () => {
    const v2 = { ...v1, fields: [v1.fields[0], { name: 'amount', type: 'string' }] };
    const problems = checkHistory([v1, v2], 'BACKWARD').flatMap((v) => v.problems);
    expect(problems).toEqual([
      { path: 'Order.amount', reason: 'type changed: the writer has int, the reader wants string' },
    ]);
  });

  it('allows int -> long promotion but not long -> int', () => {
    const asLong = { ...v1, fields: [v1.fields[0], { name: 'amount', type: 'long' }] };
    expect(readProblems(asLong, v1)).toEqual([]);
    expect(readProblems(v1, asLong)).toHaveLength(1);
  });

  it('rejects a field removed without a default where old readers must read new data (FORWARD/FULL)', () => {
    const v2 = { ...v1, fields: [v1.fields[0]] };
    // Removing a field is backward compatible by Avro's rules: the new reader ignores the old field.
    expect(checkHistory([v1, v2], 'BACKWARD_TRANSITIVE')).toEqual([]);
    const [violation] = checkHistory([v1, v2], 'FULL_TRANSITIVE');
    expect(violation.direction).toBe('forward');
    expect(violation.problems[0].path).toBe('Order.amount');
  });

  it('checks transitively: the newest version must read v1 as well as its predecessor', () => {
    const v2 = withField({ name: 'currency', type: 'string', default: 'EUR' });
    const v3 = { ...v1, fields: [v1.fields[0], { name: 'currency', type: 'string' }] }; // reads v2, not v1
    expect(checkHistory([v1, v2, v3], 'BACKWARD')).toEqual([]);
    const transitive = checkHistory([v1, v2, v3], 'BACKWARD_TRANSITIVE');
    expect(transitive.map((v) => [v.version, v.against])).toEqual([[3, 1]]);
    expect(transitive[0].problems[0].path).toBe('Order.currency');
  });

  it('matches union branches by record name', () => {
    const a = { type: 'record', name: 'A', fields: [{ name: 'x', type: 'int' }] };
    const b = { type: 'record', name: 'B', fields: [{ name: 'y', type: 'int' }] };
    expect(readProblems([a, b], [a])).toEqual([]);
    expect(readProblems([a], [a, b])[0].reason).toContain(
      "the reader's union has no branch for the writer's record B",
    );
    const a2 = { ...a, fields: [...a.fields, { name: 'z', type: 'int' }] };
    expect(readProblems([a2, b], [a, b])).toEqual([
      { path: 'A.z', reason: expect.stringContaining('no default') },
    ]);
  });

  it('every event in the repo is compatible with its history and every topic schema parses', () => {
    const set = schemaSet();
    for (const [event, versions] of set.versions) {
      const history: AvroSchema[] = versions.map((v) => set.eventSchema(event, v.version));
      expect({ event, violations: checkHistory(history, 'BACKWARD_TRANSITIVE') }).toEqual({
        event,
        violations: [],
      });
    }
    for (const t of set.catalog.topics) {
      const type = avsc.Type.forSchema(set.topicSchema(t.topic.replace('<type>', 'x')) as avsc.Schema);
      expect(type.typeName).toBe(t.events.length > 1 ? 'union:wrapped' : 'record');
    }
  });
});
