import fc from 'fast-check';
import { dlqRecordId, handledEntryOf, HandledOffsets, type HandledEntry } from '../../src';

/**
 * The reference count: a walk over every entry of `handled` (what the lag pass did before HandledOffsets), for ids
 * as dlqRecordId writes them.
 */
function handledCountIn(
  handled: ReadonlyMap<string, HandledEntry>,
  physicalDlqTopic: string,
  partition: number,
  low: bigint,
  end: bigint,
): number {
  const prefix = dlqRecordId(physicalDlqTopic, partition, '');
  let n = 0;
  for (const id of handled.keys()) {
    if (!id.startsWith(prefix)) continue;
    const offset = BigInt(id.slice(prefix.length));
    if (offset >= low && offset < end) n++;
  }
  return n;
}

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
    const index = HandledOffsets.of(handled);
    expect(index.countIn('p.task.x.dlq', 0, 0n, 10n)).toBe(2);
    expect(index.countIn('p.task.x.dlq', 0, 6n, 10n)).toBe(1);
    expect(index.countIn('p.task.x.dlq', 0, 0n, 5n)).toBe(0);
    expect(index.countIn('p.task.x.dlq', 2, 0n, 10n)).toBe(0);
  });

  it('HandledOffsets counts as a walk over every entry does, through adds and removes in any order', () => {
    const topics = ['p.task.x.dlq', 'p.task.x.dlq.old'];
    const step = fc.record({
      remove: fc.boolean(),
      topic: fc.constantFrom(...topics),
      partition: fc.integer({ min: 0, max: 2 }),
      offset: fc.integer({ min: 0, max: 200 }),
      a: fc.bigInt({ min: 0n, max: 220n }),
      b: fc.bigInt({ min: 0n, max: 220n }),
    });
    fc.assert(
      fc.property(fc.array(step, { maxLength: 300 }), (steps) => {
        const held = new Map<string, HandledEntry>();
        const index = new HandledOffsets();
        for (const [i, s] of steps.entries()) {
          const id = dlqRecordId(s.topic, s.partition, String(s.offset));
          if (s.remove) {
            held.delete(id);
            index.remove(id);
          } else {
            held.set(id, entry(i));
            index.add(id);
          }
          const [low, end] = s.a <= s.b ? [s.a, s.b] : [s.b, s.a];
          for (const topic of topics)
            for (let partition = 0; partition < 3; partition++)
              expect(index.countIn(topic, partition, low, end)).toBe(
                handledCountIn(held, topic, partition, low, end),
              );
        }
        expect(HandledOffsets.of(held).countIn(topics[0], 1, 0n, 1_000n)).toBe(
          handledCountIn(held, topics[0], 1, 0n, 1_000n),
        );
      }),
      { numRuns: 50 },
    );
  });

  it('HandledOffsets ignores ids of another shape, and removing what it does not hold changes nothing', () => {
    const index = new HandledOffsets();
    index.add('no-slashes');
    index.add('p.task.x.dlq/0/not-a-number');
    // Texts Number() would read as 5, 0 or 5: not a Kafka offset's text, so not the same offset as '5' or '0'.
    for (const text of ['05', '5.0', ' 5', '', '0x5', '-1']) index.add(dlqRecordId('p.task.x.dlq', 0, text));
    index.remove(dlqRecordId('p.task.x.dlq', 0, '5'));
    index.add(dlqRecordId('p.task.x.dlq', 0, '5'));
    index.add(dlqRecordId('p.task.x.dlq', 0, '5'));
    expect(index.countIn('p.task.x.dlq', 0, 0n, 10n)).toBe(1);
    expect(index.countIn('p.task.x.dlq', 0, 10n, 0n)).toBe(0);
    index.add(dlqRecordId('p.task.x.dlq', 0, '3')); // out of order, then 5 again: one each once sorted
    index.add(dlqRecordId('p.task.x.dlq', 0, '5'));
    expect(index.countIn('p.task.x.dlq', 0, 0n, 10n)).toBe(2);
    index.remove(dlqRecordId('p.task.x.dlq', 0, '5'));
    expect(index.countIn('p.task.x.dlq', 0, 0n, 10n)).toBe(1);
  });
});
