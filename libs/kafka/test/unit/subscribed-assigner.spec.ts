import fc from 'fast-check';
import { assignSubscribed } from '../../src';

describe('the subscription-aware round-robin assigner', () => {
  it('gives a topic only to members subscribed to it (workers of different task types can share a group)', () => {
    const a = assignSubscribed(
      [
        { memberId: 'seq-worker', topics: ['task.seq'] },
        { memberId: 'pay-worker', topics: ['task.charge', 'task.refund'] },
      ],
      { 'task.seq': 3, 'task.charge': 3, 'task.refund': 2 },
    );
    expect(a.get('seq-worker')).toEqual({ 'task.seq': [0, 1, 2] });
    expect(a.get('pay-worker')).toEqual({ 'task.charge': [0, 1, 2], 'task.refund': [0, 1] });
  });

  it('every partition of a subscribed topic has exactly one owner, a subscriber; totals of equal members differ by at most one', () => {
    const topics = ['a', 'b', 'c', 'd'];
    fc.assert(
      fc.property(
        fc.array(fc.subarray(topics, { minLength: 1 }), { minLength: 1, maxLength: 8 }),
        fc.array(fc.integer({ min: 1, max: 24 }), { minLength: 4, maxLength: 4 }),
        (subs, counts) => {
          const members = subs.map((t, i) => ({ memberId: `m${i}`, topics: t }));
          const partitions = Object.fromEntries(topics.map((t, i) => [t, counts[i]]));
          const a = assignSubscribed(members, partitions);
          for (const t of topics) {
            const subscribers = members.filter((m) => m.topics.includes(t));
            const owners = members.flatMap((m) => (a.get(m.memberId)![t] ?? []).map((p) => [p, m]));
            if (subscribers.length === 0) {
              if (owners.length) return false;
              continue;
            }
            const ps = owners.map(([p]) => p as number).sort((x, y) => x - y);
            if (JSON.stringify(ps) !== JSON.stringify([...Array(partitions[t]).keys()])) return false;
            if (owners.some(([, m]) => !(m as { topics: string[] }).topics.includes(t))) return false;
          }
          // Members with the same subscription are interchangeable: their totals differ by at most one.
          const bySub = new Map<string, number[]>();
          for (const m of members) {
            const total = Object.values(a.get(m.memberId)!).reduce((s, ps) => s + ps.length, 0);
            const k = [...m.topics].sort().join(',');
            bySub.set(k, [...(bySub.get(k) ?? []), total]);
          }
          return [...bySub.values()].every((ts) => Math.max(...ts) - Math.min(...ts) <= 1);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('is deterministic whatever order the members come in', () => {
    const members = [
      { memberId: 'b', topics: ['x', 'y'] },
      { memberId: 'a', topics: ['x'] },
      { memberId: 'c', topics: ['y'] },
    ];
    const one = assignSubscribed(members, { x: 5, y: 4 });
    const two = assignSubscribed([...members].reverse(), { x: 5, y: 4 });
    expect(Object.fromEntries(two)).toEqual(Object.fromEntries(one));
  });
});
