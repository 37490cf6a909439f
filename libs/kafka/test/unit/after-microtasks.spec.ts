import { afterMicrotasks } from '../../src';

describe('afterMicrotasks', () => {
  it('runs once every microtask of its turn has run (those queued by them too), before the next immediate', async () => {
    const order: string[] = [];
    setImmediate(() => order.push('immediate'));
    afterMicrotasks(() => order.push('after'));
    void Promise.resolve()
      .then(() => order.push('microtask 1'))
      .then(() => queueMicrotask(() => order.push('microtask 2')));
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(['microtask 1', 'microtask 2', 'after', 'immediate']);
  });

  it('runs each function given in one turn, in the order given', async () => {
    const order: number[] = [];
    afterMicrotasks(() => order.push(1));
    afterMicrotasks(() => order.push(2));
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual([1, 2]);
  });
});
