import type { RunState } from '@keyflow/workflow';
import { showRun, stepRows } from '../../src/commands/runs';
import { duration, errorLine, parseTime, print, table, terminalSafe } from '../../src/output';

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

  it("names a child run's parent and lists a parent's child runs", () => {
    const base = {
      workflow: 'w',
      version: 1,
      status: 'completed',
      startedAt: 0,
      endedAt: 5,
      plan: [],
      steps: {},
      timeline: [],
    };
    const child = {
      ...base,
      runId: 'p~one~1',
      parent: { runId: 'p', stepId: 'one', attempt: 1, idempotencyKey: 'p/one' },
    } as unknown as RunState;
    expect(showRun(child).split('\n')[1]).toBe('parent p (step one, attempt 1)');
    const parent = { ...base, runId: 'p', children: [{ stepId: 'one', attempt: 1, runId: 'p~one~1' }] };
    const text = showRun(parent as unknown as RunState);
    expect(text).toContain('children:');
    expect(text).toMatch(/one\s+1\s+p~one~1/);
  });
});

/**
 * The CLI never writes a control character it did not mean to (issue 39, fault 11): keys, error messages, signal
 * names and every other value from a run, a DLQ record or an API answer reach the terminal with their C0 and C1
 * controls (ANSI sequences, OSC titles, carriage returns, 8-bit CSI) and bidirectional overrides escaped as text.
 */
describe('terminal-safe output', () => {
  it('escapes C0 and C1 controls, DEL and bidi overrides as visible text; other characters are left alone', () => {
    expect(terminalSafe('a\x1b[31mred\x1b[0m')).toBe('a\\x1b[31mred\\x1b[0m');
    expect(terminalSafe('\x1b]0;pwned\x07')).toBe('\\x1b]0;pwned\\x07');
    expect(terminalSafe('x\u009b2Jy\u0085\u007f')).toBe('x\\x9b2Jy\\x85\\x7f');
    expect(terminalSafe('ok\rFAKE\ttab\nline\u0000')).toBe('ok\\rFAKE\\ttab\\nline\\x00');
    expect(terminalSafe('abc\u202edcba\u2066')).toBe('abc\\u202edcba\\u2066');
    expect(terminalSafe('café ✓ 日本 🙂')).toBe('café ✓ 日本 🙂');
    expect(terminalSafe('two\nlines\x1b', { keepNewlines: true })).toBe('two\nlines\\x1b');
  });

  it('print escapes human output (newlines kept) and JSON output (C1 controls and DEL as \\u escapes)', () => {
    const out: string[] = [];
    const spy = jest.spyOn(process.stdout, 'write').mockImplementation((s) => (out.push(String(s)), true));
    try {
      print({ key: 'k\x1b[2J\u009b' }, false, (d) => `key ${d.key}\nnext`);
      print({ key: 'k\x1b[2J\u009b\u007f' }, true, () => '');
    } finally {
      spy.mockRestore();
    }
    expect(out[0]).toBe('key k\\x1b[2J\\x9b\nnext\n');
    // eslint-disable-next-line no-control-regex
    expect(out[1]).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    expect(JSON.parse(out[1])).toEqual({ key: 'k\x1b[2J\u009b\u007f' }); // still the same data for scripts
  });

  it("print's human output keeps its own lines, but a value's newline cannot fake one (keys, error messages)", () => {
    const out: string[] = [];
    const spy = jest.spyOn(process.stdout, 'write').mockImplementation((s) => (out.push(String(s)), true));
    try {
      print(
        { key: 'k\nredrove 0@7 key fake', byTopic: { 't\rx': 1 }, errors: [{ message: 'boom\n  pending' }] },
        false,
        (d) =>
          `key ${d.key}\n` +
          Object.keys(d.byTopic).join(',') +
          `\n${d.errors.map((e) => e.message).join(';')}`,
      );
    } finally {
      spy.mockRestore();
    }
    expect(out[0].split('\n')).toEqual(['key k\\nredrove 0@7 key fake', 't\\rx', 'boom\\n  pending', '']);
  });

  it('an error is printed on one line: a message carrying a value (an API answer, a key) cannot fake another', () => {
    expect(errorLine(new Error('no such run r1\nkeyflow: run r1 completed\x1b[2J'))).toBe(
      'keyflow: no such run r1\\nkeyflow: run r1 completed\\x1b[2J\n',
    );
    expect(errorLine('plain\u202e')).toBe('keyflow: plain\\u202e\n');
  });

  it('table cells escape newlines too (a value cannot fake a row)', () => {
    expect(table([{ a: 'x\ny\x1b' }]).split('\n')).toEqual(['a', 'x\\ny\\x1b']);
  });
});
