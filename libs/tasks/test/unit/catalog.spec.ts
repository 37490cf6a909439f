import { BUILTIN_TASKS, chargePayment, etlExtract, etlLoad } from '../../src';
import { taskTopic } from '@keyflow/schemas';

describe('the built-in task catalog', () => {
  it('names each task once, each type a distinct task topic', () => {
    const types = [...BUILTIN_TASKS.keys()];
    expect(new Set(types.map(taskTopic)).size).toBe(types.length);
    expect(BUILTIN_TASKS.get('order.charge-payment')).toBe(chargePayment);
  });

  it("the extract input's chunk size is bounded and defaulted by the contract", () => {
    expect(etlExtract.input.parse({})).toEqual({ source: 'default', chunkSize: 1000 });
    for (const chunkSize of [0, 1.5, 50_001])
      expect(etlExtract.input.safeParse({ chunkSize }).success).toBe(false);
  });

  it('a load input names a sink the loader knows', () => {
    const chunk = { index: 0, ref: 'blob:x', count: 1 };
    expect(etlLoad.input.safeParse({ ...chunk, sink: { kind: 'sqlite', path: '/tmp/x' } }).success).toBe(
      true,
    );
    expect(etlLoad.input.safeParse({ ...chunk, sink: { kind: 'mysql', url: 'x' } }).success).toBe(false);
    expect(etlLoad.input.safeParse({ ...chunk, sink: { kind: 'postgres' } }).success).toBe(false);
  });
});
