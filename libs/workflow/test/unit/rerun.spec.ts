import { RERUN_CODES, rerunVerdict, type RunView } from '../../src';

/**
 * The one check operator tools (replay, DLQ redrive in the CLI, the ops API and console) apply before they deliver a
 * task command again (issue 39, fault 4): a command runs its handler only when the worker answers it from a stored
 * record or the engine still awaits that attempt; anything else is refused unless the operator says so.
 */
const cmd = { runId: 'r1', stepId: 'charge', attempt: 1 };
const run = (status: RunView['status'], step?: Partial<RunView['steps'][string]>): RunView => ({
  runId: 'r1',
  status,
  steps: step ? { charge: { status: 'scheduled', attempt: 1, ...step } } : {},
});
const DAY = 86_400_000;

describe('rerunVerdict: a re-delivered task command never re-runs a side effect nothing awaits', () => {
  it('a stored result or fence is re-published: safe whatever the run', () => {
    expect(rerunVerdict(cmd, { stored: true, run: run('compensated') })).toEqual({
      safe: true,
      effect: 'republished',
    });
  });

  it('a command of a compensated run (its fence expired) is refused, naming the run, its status and why', () => {
    const v = rerunVerdict(cmd, { stored: false, run: run('compensated', { status: 'failed' }) });
    expect(v).toMatchObject({ safe: false, code: RERUN_CODES.runEnded });
    expect(!v.safe && v.reason).toMatch(
      /run r1 is compensated: step charge \(attempt 1\).*no longer awaited.*compensated/,
    );
  });

  it.each(['completed', 'failed', 'cancelled'] as const)('a command of a %s run is refused', (status) => {
    expect(rerunVerdict(cmd, { stored: false, run: run(status) })).toMatchObject({
      safe: false,
      code: RERUN_CODES.runEnded,
    });
  });

  it('a command whose step is done, failed or at another attempt is refused; the awaited attempt is safe', () => {
    expect(rerunVerdict(cmd, { run: run('running', { status: 'completed' }) })).toMatchObject({
      safe: false,
      code: RERUN_CODES.stepNotAwaited,
    });
    const other = rerunVerdict(cmd, { run: run('running', { attempt: 2 }) });
    expect(!other.safe && other.reason).toMatch(/the step is scheduled at attempt 2/);
    expect(rerunVerdict(cmd, { run: run('running', {}) })).toEqual({ safe: true, effect: 'awaited' });
    expect(rerunVerdict(cmd, { run: run('running') })).toMatchObject({ code: RERUN_CODES.stepNotAwaited });
  });

  it('a run the orchestrator does not know is refused', () => {
    expect(rerunVerdict(cmd, { stored: false, run: null })).toMatchObject({
      safe: false,
      code: RERUN_CODES.runNotFound,
    });
  });

  it("without the engine's view: a record older than the fences less a margin, or one without a record, is refused", () => {
    const ttl = 7 * DAY;
    expect(
      rerunVerdict(cmd, { stored: false, ageMs: ttl - 30 * 60_000, completionTtlMs: ttl }),
    ).toMatchObject({
      code: RERUN_CODES.olderThanFences,
    });
    const fresh = rerunVerdict(cmd, { stored: false, ageMs: 60_000, completionTtlMs: ttl });
    expect(fresh).toMatchObject({ safe: false, code: RERUN_CODES.unknown });
    expect(!fresh.safe && fresh.reason).toMatch(/KEYFLOW_API_URL/);
    expect(rerunVerdict(cmd, {})).toMatchObject({ safe: false, code: RERUN_CODES.unknown });
  });
});
