/**
 * A place in a {@link Semaphore}'s line, taken with {@link Semaphore.enqueue}: `granted` resolves when the slot is
 * handed over (the holder then owes one `release`), or rejects with the reason given to `cancel`.
 */
export interface SlotWait {
  readonly granted: Promise<void>;
  /**
   * Leaves the line: `granted` rejects with `reason` and no slot is taken. Returns false, doing nothing, when the
   * slot was already handed over (the holder then owes its `release` as usual) or the wait was already cancelled.
   */
  cancel(reason: unknown): boolean;
}

/** A waiter in line: settled once, by a grant or a cancel. */
interface Waiter {
  settled: boolean;
  resolve: () => void;
  reject: (reason: unknown) => void;
}

/** A counting semaphore: bounds in-flight work; waiters are served in FIFO order. */
export class Semaphore {
  private waiters: Waiter[] = [];
  constructor(private available: number) {}

  /** Number of holders allowed right now minus those holding. */
  get free(): number {
    return this.available;
  }

  get waiting(): number {
    return this.waiters.length;
  }

  /** Takes a slot if one is free now (never while others wait: free slots go to waiters first). */
  tryAcquire(): boolean {
    if (this.available <= 0) return false;
    this.available--;
    return true;
  }

  /**
   * Takes a place at the end of the line (granted at once when a slot is free). Costs one promise and no
   * AbortSignal listener: whoever stops the waiting calls `cancel` (an AbortSignal listener per waiter cost the
   * worker's hot path about a tenth of its CPU, see BENCHMARKS.md "Workers", 2026-12-03 evening).
   */
  enqueue(): SlotWait {
    // A slot free now is taken at once (free slots go to the line first, so none is free while others wait).
    if (this.tryAcquire()) return { granted: Promise.resolve(), cancel: () => false };
    let resolve!: () => void;
    let reject!: (reason: unknown) => void;
    const granted = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
    const w: Waiter = { settled: false, resolve, reject };
    this.waiters.push(w);
    return {
      granted,
      cancel: (reason) => {
        if (w.settled) return false;
        w.settled = true;
        const i = this.waiters.indexOf(w);
        if (i >= 0) this.waiters.splice(i, 1); // an unsettled waiter is always in line; guarded all the same
        w.reject(reason);
        return true;
      },
    };
  }

  /**
   * Takes a slot, waiting in line when none is free. With `signal`: an abort while waiting leaves the line without a
   * slot and rejects with the signal's reason; a signal already aborted is refused at once (even with a slot free).
   */
  async acquire(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    const wait = this.enqueue(); // granted at once when a slot is free
    if (!signal) return wait.granted;
    const aborted = () => wait.cancel(signal.reason);
    signal.addEventListener('abort', aborted, { once: true });
    try {
      await wait.granted;
    } finally {
      signal.removeEventListener('abort', aborted);
    }
  }

  /** Gives a slot back: to the first waiter in line, else to the free count. */
  release(): void {
    const next = this.waiters.shift();
    if (!next) {
      this.available++;
      return;
    }
    next.settled = true;
    next.resolve();
  }
}
