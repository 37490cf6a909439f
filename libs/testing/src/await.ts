import { KeyflowError, retryableOf } from '@keyflow/errors';
/**
 * Await helpers: tests wait for the event they expect, with a deadline, never for a fixed time.
 */

/** The awaited condition did not hold before the deadline. */
export class AwaitTimeoutError extends KeyflowError {
  readonly code = 'AWAIT_TIMEOUT';
  readonly retryable = retryableOf('AWAIT_TIMEOUT');
  constructor(what: string, timeoutMs: number, last?: unknown) {
    super(
      `timed out after ${timeoutMs} ms waiting for ${what}${last === undefined ? '' : `; last value: ${JSON.stringify(last)}`}`,
    );
  }
}

/** Options of {@link eventually}. */
export interface EventuallyOptions<T> {
  /** Deadline in ms (default 30 000). */
  timeoutMs?: number;
  /** Poll period in ms (default 50). */
  intervalMs?: number;
  /** Accepts a probed value (default: truthy). */
  until?: (v: T) => boolean;
  /**
   * Called before each probe; what it throws ends the wait at once (e.g. a service the wait depends on has exited,
   * so waiting longer is pointless).
   */
  check?: () => void;
}

/**
 * Polls `probe` until it returns a value accepted by `until` (default: truthy), or the deadline passes: the one
 * polling wait of the tests, the scenarios and the benchmarks. For state that has no event to subscribe to (a row
 * count, a consumer group's committed offsets, a counter a consumer bumps).
 * @throws AwaitTimeoutError naming `what` and the last value seen.
 * @throws whatever `opts.check` throws.
 */
export async function eventually<T>(
  what: string,
  probe: () => T | Promise<T>,
  opts: EventuallyOptions<T> = {},
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const intervalMs = opts.intervalMs ?? 50;
  const until = opts.until ?? ((v: T) => Boolean(v));
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  for (;;) {
    opts.check?.();
    last = await probe();
    if (until(last)) return last;
    if (Date.now() > deadline) throw new AwaitTimeoutError(what, timeoutMs, last);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * A collector that resolves when `count` items have been pushed (e.g. from a consumer's eachMessage).
 * `wait()` rejects with AwaitTimeoutError after `timeoutMs` (default 30 000 ms).
 */
export class Collector<T> {
  readonly items: T[] = [];
  private waiters: Array<{ count: number; resolve: (items: T[]) => void }> = [];

  push(item: T): void {
    this.items.push(item);
    this.waiters = this.waiters.filter((w) => {
      if (this.items.length >= w.count) {
        w.resolve(this.items.slice());
        return false;
      }
      return true;
    });
  }

  wait(count: number, timeoutMs = 30_000, what = `${count} items`): Promise<T[]> {
    if (this.items.length >= count) return Promise.resolve(this.items.slice());
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new AwaitTimeoutError(what, timeoutMs, this.items.length)),
        timeoutMs,
      );
      this.waiters.push({
        count,
        resolve: (items) => {
          clearTimeout(timer);
          resolve(items);
        },
      });
    });
  }
}
