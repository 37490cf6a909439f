import { taskTopic } from '@keyflow/schemas';
import { chargePayment } from '@keyflow/example-order-saga';
import { ALL_TASKS as BUILTIN_TASKS, allWorkflows as builtinWorkflows } from '../../src/catalog';

describe('the built-in task catalog', () => {
  it('names each task once, each type a distinct task topic', () => {
    const types = [...BUILTIN_TASKS.keys()];
    expect(new Set(types.map(taskTopic)).size).toBe(types.length);
    expect(BUILTIN_TASKS.get('order.charge-payment')).toBe(chargePayment);
  });
});

describe('the built-in workflows', () => {
  it('use only task types of the task catalog (one source for types and topics)', () => {
    const types = builtinWorkflows.flatMap((d) =>
      [...d.stepIndex.values()].flatMap((s) =>
        s.kind === 'task'
          ? [s.type, ...(s.compensate ? [s.compensate.type] : [])]
          : s.kind === 'map'
            ? [s.type]
            : [],
      ),
    );
    expect(types.length).toBeGreaterThan(10);
    expect(types.filter((t) => !BUILTIN_TASKS.has(t))).toEqual([]);
  });
});
