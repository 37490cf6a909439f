import { dlqRecordId, handledCountIn, handledEntryOf, type HandledEntry } from '../../src';

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
});
