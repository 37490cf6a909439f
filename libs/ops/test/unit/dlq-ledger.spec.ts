import { dlqRecordId, handledCountIn, handledEntryOf, HandledOffsets, type HandledEntry } from '../../src';

const entry = (recordTimestamp: number): HandledEntry => ({
  action: 'REDRIVEN',
  recordTimestamp,
  at: recordTimestamp + 1,
  handledBy: 'test',
  originalTopic: 'p.task.x',
  reason: null,
});

describe('the DLQ ledger', () => {
  const handled = new Map([
    [dlqRecordId('p.task.x.dlq', 0, '5'), entry(1_000)],
    [dlqRecordId('p.task.x.dlq', 0, '7'), entry(1_001)],
    [dlqRecordId('p.task.x.dlq', 1, '5'), entry(1_002)],
    [dlqRecordId('p.task.x.dlq.old', 0, '6'), entry(1_003)],
  ]);

  it('an entry applies only to the record with its timestamp at its offset (a recreated DLQ does not inherit it)', () => {
    expect(handledEntryOf(handled, 'p.task.x.dlq', 0, { offset: '5', timestamp: '1000' })).toEqual(
      entry(1_000),
    );
    // The topic deleted and created again: offset 5 is a new record, with another timestamp.
    expect(handledEntryOf(handled, 'p.task.x.dlq', 0, { offset: '5', timestamp: '2000' })).toBeUndefined();
    expect(handledEntryOf(handled, 'p.task.x.dlq', 1, { offset: '7', timestamp: '1001' })).toBeUndefined();
    expect(handledEntryOf(undefined, 'p.task.x.dlq', 0, { offset: '5', timestamp: '1000' })).toBeUndefined();
  });

  it('counts the entries of one partition in an offset range, not those of a topic sharing its name as a prefix', () => {
    expect(handledCountIn(handled, 'p.task.x.dlq', 0, 0n, 10n)).toBe(2);
    expect(handledCountIn(handled, 'p.task.x.dlq', 0, 6n, 10n)).toBe(1);
    expect(handledCountIn(handled, 'p.task.x.dlq', 0, 0n, 5n)).toBe(0);
    expect(handledCountIn(handled, 'p.task.x.dlq', 2, 0n, 10n)).toBe(0);
  });

  it('HandledOffsets counts as handledCountIn does, through adds and removes in any order (seeded)', () => {
    for (let seed = 1; seed <= 10; seed++) {
      const random = prng(seed);
      const held = new Map<string, HandledEntry>();
      const index = new HandledOffsets();
      const got: number[] = [];
      const want: number[] = [];
      for (let step = 0; step < 400; step++) {
        const id = dlqRecordId(
          random(2) ? 'p.task.x.dlq' : 'p.task.x.dlq.old',
          random(3),
          String(random(200)),
        );
        if (random(4) === 0) {
          held.delete(id);
          index.remove(id);
        } else {
          held.set(id, entry(step));
          index.add(id);
        }
        const [a, b] = [BigInt(random(220)), BigInt(random(220))];
        const [low, end] = a <= b ? [a, b] : [b, a];
        for (const topic of ['p.task.x.dlq', 'p.task.x.dlq.old'])
          for (let partition = 0; partition < 3; partition++) {
            got.push(index.countIn(topic, partition, low, end));
            want.push(handledCountIn(held, topic, partition, low, end));
          }
      }
      expect([seed, got]).toEqual([seed, want]);
      expect(HandledOffsets.of(held).countIn('p.task.x.dlq', 1, 0n, 1_000n)).toBe(
        handledCountIn(held, 'p.task.x.dlq', 1, 0n, 1_000n),
      );
    }
  });

  it('HandledOffsets ignores ids of another shape, and removing what it does not hold changes nothing', () => {
    const index = new HandledOffsets();
    index.add('no-slashes');
    index.add('p.task.x.dlq/0/not-a-number');
    index.remove(dlqRecordId('p.task.x.dlq', 0, '5'));
    index.add(dlqRecordId('p.task.x.dlq', 0, '5'));
    index.add(dlqRecordId('p.task.x.dlq', 0, '5'));
    expect(index.countIn('p.task.x.dlq', 0, 0n, 10n)).toBe(1);
    expect(index.countIn('p.task.x.dlq', 0, 10n, 0n)).toBe(0);
  });
});

/** A small seeded PRNG (mulberry32): integers in [0, n); the same seed gives the same sequence. */
function prng(seed: number): (n: number) => number {
  let a = seed >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}
