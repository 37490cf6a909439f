import { Heap } from 'heap-js';
import type { RunState, TimerState } from '@keyflow/workflow';

interface Entry {
  /** ms since epoch. */
  dueAt: number;
  runId: string;
  timerId: string;
}

/** Stale heap entries tolerated before a rebuild (see TimerQueue.compactIfStale). */
const COMPACT_SLACK = 10_000;

/** A due timer of a run, as {@link TimerQueue.takeDue} returns it. */
export interface DueTimer extends Entry {
  timer: TimerState;
}

/**
 * The durable timers of one partition's runs in due order (a binary heap from heap-js), so that a tick costs the
 * timers that are due, not a scan of every run and timer the engine holds.
 *
 * Entries are added as runs change and never removed in place: a timer that was cleared (its step's result came) or
 * replaced stays in the heap until it is due, and is then dropped because the run's committed state no longer has it
 * with that due time (lazy deletion). So the heap holds at most the timers set during the longest timeout.
 */
export class TimerQueue {
  private readonly heap = new Heap<Entry>((a, b) => a.dueAt - b.dueAt);
  /** Live timers at the last rebuild (see compactIfStale). */
  private live = 0;

  /** Adds the timers `next` has and `previous` (the run's committed state before it, if any) did not, with that due time. */
  track(next: RunState, previous?: RunState): void {
    for (const [timerId, t] of Object.entries(next.timers))
      if (previous?.timers[timerId]?.dueAt !== t.dueAt)
        this.heap.push({ dueAt: t.dueAt, runId: next.runId, timerId });
  }

  /**
   * Takes the entries due at or before `now` (ms since epoch), earliest first, and returns those the runs'
   * committed states (`current`) still hold with that due time. Taken entries are not returned again (a timer fires
   * once per owner until its TimerFired is applied): hand back with {@link giveBack} those that could not be fired.
   */
  takeDue(now: number, current: (runId: string) => RunState | undefined): Array<DueTimer> {
    const out: DueTimer[] = [];
    for (let top = this.heap.peek(); top && top.dueAt <= now; top = this.heap.peek()) {
      this.heap.pop();
      const timer = current(top.runId)?.timers[top.timerId];
      if (timer && timer.dueAt === top.dueAt) out.push({ ...top, timer });
    }
    return out;
  }

  /** Puts taken timers back (their TimerFired could not be published): the next tick takes them again. */
  giveBack(timers: DueTimer[]): void {
    for (const { dueAt, runId, timerId } of timers) this.heap.push({ dueAt, runId, timerId });
  }

  /**
   * Rebuilds the heap from the runs' timers when stale entries dominate it: more than COMPACT_SLACK entries beyond
   * twice the live timers counted at the last rebuild (ended or forgotten runs leave theirs until they are due, a
   * day's run timeout included). Walks `timed`, the ids of the runs holding timers (`current` gives each one's
   * committed state), never every run held; only after the heap has doubled.
   */
  compactIfStale(timed: Iterable<string>, current: (runId: string) => RunState | undefined): void {
    if (this.heap.size() <= 2 * this.live + COMPACT_SLACK) return;
    const entries: Entry[] = [];
    for (const runId of timed) {
      const s = current(runId);
      if (s)
        for (const [timerId, t] of Object.entries(s.timers)) entries.push({ dueAt: t.dueAt, runId, timerId });
    }
    this.heap.clear();
    this.heap.init(entries);
    this.live = entries.length;
  }

  /** Entries held, stale ones included. */
  get size(): number {
    return this.heap.size();
  }
}
