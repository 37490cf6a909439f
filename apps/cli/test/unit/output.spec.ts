import type { RunState } from '@keyflow/workflow';
import { stepRows } from '../../src/commands/runs';
import { duration, parseTime, table } from '../../src/output';

describe('CLI output and option parsing', () => {
  it('parses times as ms, ISO-8601 or a duration back from now', () => {
    const now = Date.parse('2026-12-01T12:00:00Z');
    expect(parseTime('1700000000000', now)).toBe(1_700_000_000_000);
    expect(parseTime('2026-12-01T11:00:00Z', now)).toBe(now - 3_600_000);
    expect(parseTime('15m', now)).toBe(now - 15 * 60_000);
    expect(parseTime('7d', now)).toBe(now - 7 * 86_400_000);
    expect(() => parseTime('yesterday-ish', now)).toThrow(/not a time/);
  });

  it('pads table columns to their widest cell and shows missing values as -', () => {
    expect(
      table([
        { a: 'x', b: 1 },
        { a: 'longer', b: null },
      ]).split('\n'),
    ).toEqual(['a       b', 'x       1', 'longer  -']);
    expect(table([])).toBe('(none)');
  });

  it('prints durations in the largest sensible unit', () => {
    expect([duration(340), duration(1_250), duration(125_000), duration(7_380_000), duration(null)]).toEqual([
      '340 ms',
      '1.3 s',
      '2 min 5 s',
      '2 h 3 min',
      '-',
    ]);
  });
});

describe('runs show', () => {
  it('sums a map step up from its items among the steps, failed ones counted', () => {
    const run = {
      plan: ['each', 'sum'],
      steps: {
        each: { status: 'failed', attempt: 1, map: { total: 3, next: 3, done: 1, segments: [] } },
        'each[0]': { status: 'completed', attempt: 1 },
        'each[1]': { status: 'failed', attempt: 2 },
        'each[2]': { status: 'failed', attempt: 1 },
        'each.compensate': { status: 'completed', attempt: 1 },
      },
    } as unknown as RunState;
    expect(stepRows(run).map((r) => [r.step, r.items])).toEqual([
      ['each', '1/3 done, 2 failed'],
      ['each.compensate', ''],
    ]);
  });
});
