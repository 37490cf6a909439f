import type { RunState, TimerState } from '@keyflow/workflow';
import { TimerQueue } from '../../src/engine/timers';

const run = (runId: string, timers: Record<string, number>): RunState =>
  ({
    runId,
    timers: Object.fromEntries(
      Object.entries(timers).map(([id, dueAt]) => [id, { dueAt, purpose: 'retry' } as TimerState]),
    ),
  }) as unknown as RunState;

describe('the timer queue', () => {
  it('gives the due timers earliest first, each once, and nothing that is not due', () => {
    const q = new TimerQueue();
    const runs = new Map([
      ['a', run('a', { t1: 300, t2: 100 })],
      ['b', run('b', { t1: 200, late: 10_000 })],
    ]);
    runs.forEach((s) => q.track(s));
    const due = q.takeDue(300, (id) => runs.get(id));
    expect(due.map((d) => `${d.runId}/${d.timerId}`)).toEqual(['a/t2', 'b/t1', 'a/t1']);
    expect(q.takeDue(300, (id) => runs.get(id))).toEqual([]);
    expect(q.takeDue(10_000, (id) => runs.get(id)).map((d) => d.timerId)).toEqual(['late']);
  });

  it('a timer cleared or moved since it was queued does not fire at its old time', () => {
    const q = new TimerQueue();
    const before = run('a', { cleared: 100, moved: 100, kept: 100 });
    q.track(before);
    const after = run('a', { moved: 500, kept: 100 });
    q.track(after, before); // adds only what changed: moved@500
    const current = () => after;
    expect(q.takeDue(100, current).map((d) => d.timerId)).toEqual(['kept']);
    expect(q.takeDue(500, current).map((d) => `${d.timerId}@${d.dueAt}`)).toEqual(['moved@500']);
  });

  it('timers given back (their TimerFired was not published) are due again', () => {
    const q = new TimerQueue();
    const s = run('a', { t: 100 });
    q.track(s);
    const due = q.takeDue(100, () => s);
    q.giveBack(due);
    expect(q.takeDue(100, () => s).map((d) => d.timerId)).toEqual(['t']);
  });

  it('a run forgotten meanwhile (or restored elsewhere) fires nothing', () => {
    const q = new TimerQueue();
    q.track(run('gone', { t: 1 }));
    expect(q.takeDue(100, () => undefined)).toEqual([]);
    expect(q.size).toBe(0);
  });
});

describe('the timer queue under churn', () => {
  it('drops the entries of runs that ended or were forgotten once they dominate the heap, keeping every live timer', () => {
    const q = new TimerQueue();
    const ended = Array.from({ length: 30_000 }, (_, i) => run(`done-${i}`, { 'run-timeout': 86_400_000 }));
    ended.forEach((s) => q.track(s));
    const live = run('live', { t: 500 });
    q.track(live);
    // Only the runs holding timers are walked: the ended runs hold none now (or are gone).
    q.compactIfStale(['live', 'done-1'], (id) => (id === 'live' ? live : undefined));
    expect(q.size).toBe(1);
    expect(q.takeDue(500, () => live).map((d) => d.timerId)).toEqual(['t']);
    q.track(run('another', { u: 1 }));
    q.compactIfStale([], () => undefined); // below the slack: nothing rebuilt
    expect(q.size).toBe(1);
  });
});
