/**
 * How long the overview remembers the runs it saw end, for their chain times (ms): runs that ended in the last hour,
 * rounded out to whole minutes ({@link ChainTimes}).
 */
export const CHAIN_WINDOW_MS = 60 * 60_000;

/** The width of one slice of the window, ms: a run is counted in the minute it ended. */
export const CHAIN_SLICE_MS = 60_000;

/**
 * Relative accuracy of a chain-time quantile: the value given is within 1 % of the run's chain time that nearest
 * rank picks (the bucket rule of DDSketch, Masson, Rim & Lee, "DDSketch: a fast and fully-mergeable quantile sketch
 * with relative-error guarantees", PVLDB 12(12), 2019).
 */
export const CHAIN_ACCURACY = 0.01;

const GAMMA = (1 + CHAIN_ACCURACY) / (1 - CHAIN_ACCURACY);
const LOG_GAMMA = Math.log(GAMMA);

/**
 * The bucket of a chain time `ms`: 0 holds 0 ms (and a negative time, a clock stepped back between start and end);
 * 1 holds (0, 1]; k >= 2 holds (GAMMA^(k-2), GAMMA^(k-1)].
 */
function bucketOf(ms: number): number {
  return ms <= 0 ? 0 : 1 + Math.max(0, Math.ceil(Math.log(ms) / LOG_GAMMA));
}

/** The value a bucket stands for, ms: within CHAIN_ACCURACY of every time in it, rounded to the ms. */
function valueOf(bucket: number): number {
  return bucket === 0 ? 0 : Math.round((2 * GAMMA ** (bucket - 1)) / (GAMMA + 1));
}

/** One workflow's chain times in the window: how many runs ended, and the p50 and p95 (nearest rank), ms. */
export interface ChainFigures {
  ended: number;
  p50Ms: number | null;
  p95Ms: number | null;
}

/**
 * The chain times (run start to end, ms) of the runs that ended in the last {@link CHAIN_WINDOW_MS}, per workflow,
 * as counts in log-spaced buckets per minute of the runs' ends. Adding and removing a run cost O(1); the figures cost
 * the window's minutes times the buckets they use, never the runs: the overview reads them on the engine's event loop,
 * where a sort of every run that ended in the hour (millions at a thousand runs/s) would stall every partition.
 * Memory: workflows x 61 minutes x the buckets their times use (a few dozen for times within a factor of two of each
 * other; about 900 from 1 ms to a day).
 *
 * A run is removed with the chain time it was added with (a retried run that runs again, a run forgotten): the counts
 * are exact, only the values are bucketed. A minute once dropped from the window is never held again (`floor` only
 * rises), so a removal cannot take a count from another run added after a clock stepped back. A chain time that is
 * not a number (a state without its start) is not counted. No quantile-sketch library takes a removal (DDSketch's
 * `accept` refuses a negative weight), hence these few lines.
 */
export class ChainTimes {
  /** Per minute (ms since epoch / CHAIN_SLICE_MS), per workflow, per bucket: runs. Minutes in ascending order. */
  private readonly minutes = new Map<number, Map<string, Map<number, number>>>();
  /** The latest minute held (ms since epoch / CHAIN_SLICE_MS). */
  private newest = -Infinity;
  /** The first minute that can be held: every earlier one has left the window. Only rises. */
  private floor = -Infinity;

  /**
   * Counts a run of `workflow` that ended at `endedAt` (ms since epoch) after `ms` (its chain time); a run that ended
   * before the window at `now` is not counted.
   */
  add(workflow: string, endedAt: number, ms: number, now = Date.now()): void {
    this.prune(now);
    const minute = Math.floor(endedAt / CHAIN_SLICE_MS);
    if (!(minute >= this.floor) || !Number.isFinite(ms)) return;
    let m = this.minutes.get(minute);
    if (!m) {
      m = new Map();
      this.minutes.set(minute, m);
      if (minute < this.newest) this.reorder();
      else this.newest = minute;
    }
    let w = m.get(workflow);
    if (!w) m.set(workflow, (w = new Map()));
    const b = bucketOf(ms);
    w.set(b, (w.get(b) ?? 0) + 1);
  }

  /** Takes back a run {@link add} counted, with the same arguments (nothing when its minute left the window). */
  remove(workflow: string, endedAt: number, ms: number): void {
    if (!Number.isFinite(ms)) return;
    const m = this.minutes.get(Math.floor(endedAt / CHAIN_SLICE_MS));
    const w = m?.get(workflow);
    const b = bucketOf(ms);
    const n = w?.get(b);
    if (!n) return;
    if (n > 1) w!.set(b, n - 1);
    else {
      w!.delete(b);
      if (w!.size === 0) m!.delete(workflow);
    }
  }

  /**
   * Per workflow with runs ended in the window (minutes from `now` - CHAIN_WINDOW_MS on): count, p50, p95. A `now`
   * ahead of the clock drops the minutes before its window for good (as the clock reaching it would).
   */
  figures(now = Date.now()): Map<string, ChainFigures> {
    this.prune(now);
    const merged = new Map<string, Map<number, number>>();
    for (const m of this.minutes.values())
      for (const [workflow, buckets] of m) {
        let into = merged.get(workflow);
        if (!into) merged.set(workflow, (into = new Map()));
        for (const [b, n] of buckets) into.set(b, (into.get(b) ?? 0) + n);
      }
    const out = new Map<string, ChainFigures>();
    for (const [workflow, buckets] of merged) {
      const sorted = [...buckets].sort((a, b) => a[0] - b[0]);
      const ended = sorted.reduce((sum, [, n]) => sum + n, 0);
      if (ended === 0) continue;
      out.set(workflow, { ended, p50Ms: rank(sorted, ended, 0.5), p95Ms: rank(sorted, ended, 0.95) });
    }
    return out;
  }

  /** Buckets held, over every minute and workflow: what the memory grows with (runs do not). */
  get buckets(): number {
    let n = 0;
    for (const m of this.minutes.values()) for (const w of m.values()) n += w.size;
    return n;
  }

  /** Drops the minutes before the window at `now`, from the front (minutes are kept in ascending order). */
  private prune(now: number): void {
    this.floor = Math.max(this.floor, Math.floor((now - CHAIN_WINDOW_MS) / CHAIN_SLICE_MS));
    for (const minute of this.minutes.keys()) {
      if (minute >= this.floor) return;
      this.minutes.delete(minute);
    }
  }

  /** Puts the minutes back in ascending order (a run that ended in an earlier minute came in late). */
  private reorder(): void {
    const all = [...this.minutes].sort((a, b) => a[0] - b[0]);
    this.minutes.clear();
    for (const [k, v] of all) this.minutes.set(k, v);
  }
}

/** The value at quantile `q` by nearest rank (the smallest with at least `q` of the runs at or below it). */
function rank(sorted: Array<[bucket: number, runs: number]>, total: number, q: number): number {
  const want = Math.max(1, Math.ceil(q * total));
  let seen = 0;
  for (const [b, n] of sorted) {
    seen += n;
    if (seen >= want) return valueOf(b);
  }
  return valueOf(sorted[sorted.length - 1][0]);
}
