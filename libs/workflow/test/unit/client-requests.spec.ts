import { PendingRuns, reduce, workflow, type RunState, type WorkflowInput } from '../../src';

let at = 1_000_000;
let n = 0;
const input = (extra: Record<string, unknown>) =>
  ({ eventId: `e${++n}`, at: (at += 10), runId: 'r1', ...extra }) as WorkflowInput;
const start = (wf: string) => input({ kind: 'start', workflow: wf, version: 1, businessKey: 'b', input: {} });

describe('client requests (signals, cancels, retries) are applied once per id', () => {
  const twoApprovals = workflow('two-approvals', 1)
    .wait('first', { signal: 'approved', timerMs: 600_000 })
    .wait('second', { signal: 'approved', timerMs: 600_000 })
    .build();

  it('a signal repeated with the same event id is ignored as DUPLICATE_REQUEST: one approval completes one wait', () => {
    let s = reduce(twoApprovals, undefined, start('two-approvals')).state!;
    const approval = input({ kind: 'signal', signal: 'approved', payload: 'alice' });
    const first = reduce(twoApprovals, s, approval);
    expect(first.ignored).toBeUndefined();
    s = first.state!;
    expect(s.status).toBe('waiting');
    const again = reduce(twoApprovals, s, { ...approval, at: (at += 10) });
    expect(again.ignoredReason).toBe('DUPLICATE_REQUEST');
    expect(again.state).toBe(s);
    expect(s.status).toBe('waiting');
    expect(s.steps.second.status).toBe('waiting');
    // Another approval (another id) completes the run.
    const second = reduce(twoApprovals, s, input({ kind: 'signal', signal: 'approved', payload: 'bob' }));
    expect(second.state!.status).toBe('completed');
  });

  it('a buffered signal repeated with the same id is not buffered again after its wait consumed it', () => {
    const later = workflow('later', 1)
      .task('a', { type: 'echo' })
      .wait('w1', { signal: 'go', timerMs: 600_000 })
      .wait('w2', { signal: 'go', timerMs: 600_000 })
      .build();
    let s = reduce(later, undefined, start('later')).state!;
    const go = input({ kind: 'signal', signal: 'go', payload: 1 });
    s = reduce(later, s, go).state!; // buffered
    s = reduce(later, s, input({ kind: 'task-completed', stepId: 'a', attempt: 1, output: {} })).state!;
    expect(s.steps.w1.status).toBe('completed'); // took the buffered signal
    const again = reduce(later, s, { ...go, at: (at += 10) });
    expect(again.ignoredReason).toBe('DUPLICATE_REQUEST');
    expect(again.state!.signals).toEqual({});
  });

  it('a cancel and a retry repeated with the same id are ignored as DUPLICATE_REQUEST', () => {
    const oneTask = workflow('one-task', 1)
      .task('a', { type: 'echo', retry: { maxAttempts: 1 } })
      .task('b', { type: 'echo', retry: { maxAttempts: 1 } })
      .build();
    let s = reduce(oneTask, undefined, start('one-task')).state!;
    s = reduce(
      oneTask,
      s,
      input({
        kind: 'task-failed',
        stepId: 'a',
        attempt: 1,
        errorClass: 'E',
        message: 'm',
        retryable: false,
      }),
    ).state!;
    expect(s.status).toBe('failed');
    const retry = input({ kind: 'retry' });
    s = reduce(oneTask, s, retry).state!;
    expect(s.status).toBe('running');
    expect(reduce(oneTask, s, { ...retry, at: (at += 10) }).ignoredReason).toBe('DUPLICATE_REQUEST');
    const cancel = input({ kind: 'cancel', reason: 'r', terminate: true });
    s = reduce(oneTask, s, cancel).state!;
    expect(s.status).toBe('cancelled');
    expect(reduce(oneTask, s, { ...cancel, at: (at += 10) }).ignoredReason).toBe('DUPLICATE_REQUEST');
  });

  it('the ids a run remembers are bounded (the latest CLIENT_REQUEST_IDS_MAX)', async () => {
    const { CLIENT_REQUEST_IDS_MAX } = (await import('../../src')) as unknown as {
      CLIENT_REQUEST_IDS_MAX: number;
    };
    expect(CLIENT_REQUEST_IDS_MAX).toBeGreaterThanOrEqual(100);
    const buffer = workflow('buffer', 1).wait('w', { signal: 'never', timerMs: 600_000 }).build();
    let s: RunState = reduce(buffer, undefined, start('buffer')).state!;
    const first = input({ kind: 'signal', signal: 's', payload: 0 });
    s = reduce(buffer, s, first).state!;
    for (let i = 0; i < CLIENT_REQUEST_IDS_MAX + 5; i++)
      s = reduce(buffer, s, input({ kind: 'signal', signal: 's', payload: i })).state!;
    expect((s as RunState & { requestIds: string[] }).requestIds).toHaveLength(CLIENT_REQUEST_IDS_MAX);
    expect((s as RunState & { requestIds: string[] }).requestIds).not.toContain(first.eventId);
  });

  it('PendingRuns dedupes within one batch too (the copy remembers the id)', () => {
    const def = twoApprovals;
    const committed = reduce(def, undefined, start('two-approvals')).state!;
    const pending = new PendingRuns(() => committed);
    const approval = input({ kind: 'signal', signal: 'approved', payload: 'alice' });
    expect(pending.apply(def, approval).ignored).toBeUndefined();
    expect(pending.apply(def, { ...approval, at: (at += 10) }).ignoredReason).toBe('DUPLICATE_REQUEST');
    expect(pending.get('r1')!.status).toBe('waiting');
  });
});

describe('a retried run', () => {
  it('re-arms its run timeout (a retried run cannot run forever)', () => {
    const timed = workflow('timed', 1)
      .task('a', { type: 'echo', retry: { maxAttempts: 1 } })
      .timeout(60_000)
      .build();
    let s = reduce(timed, undefined, start('timed')).state!;
    expect(s.timers['run-timeout']).toBeDefined();
    s = reduce(
      timed,
      s,
      input({
        kind: 'task-failed',
        stepId: 'a',
        attempt: 1,
        errorClass: 'E',
        message: 'm',
        retryable: false,
      }),
    ).state!;
    expect(s.status).toBe('failed');
    expect(s.timers['run-timeout']).toBeUndefined();
    const retry = input({ kind: 'retry' });
    s = reduce(timed, s, retry).state!;
    expect(s.status).toBe('running');
    expect(s.timers['run-timeout']).toEqual({ dueAt: retry.at + 60_000, purpose: 'run-timeout' });
  });
});
