/**
 * The signals of a task's attempts: what aborts a running handler (its attempt's timeout; shutdown, revocation or a
 * lost lease for all attempts of the task) and the one-listener-per-signal fan-out the tasks in flight share.
 */
/** One attempt's abort signal (see {@link AttemptSignals.attempt}). */
export interface AttemptSignal {
  readonly signal: AbortSignal;
  dispose(): void;
}

/**
 * The signals of one task's attempts: each attempt gets its own AbortSignal ({@link attempt}, or {@link next} for a
 * backoff); {@link stop} (shutdown, revocation, a lost lease) aborts the newest one and every later one with the
 * same reason.
 */
export class AttemptSignals {
  stopped = false;
  reason: unknown;
  private current?: AbortController;
  /** Bumped by every {@link attempt} and {@link next}: an attempt whose number is not the latest is over. */
  private generation = 0;

  /** A fresh signal for the next attempt (or backoff), already aborted once stopped; the one a stop aborts. */
  next(): AbortController {
    this.generation++;
    return (this.current = this.fresh());
  }

  /** A new controller, already aborted once stopped. */
  private fresh(): AbortController {
    const ac = new AbortController();
    if (this.stopped) ac.abort(this.reason);
    return ac;
  }

  /**
   * The signal of one attempt with a timeout of `timeoutMs` from now, made on first read: a handler that never reads
   * `signal` costs no AbortController and no timer (the timeout only aborts the signal: a handler is never
   * abandoned, so nothing else needs the timer). Read late, the signal is already aborted when the deadline or a
   * stop has passed. Call `dispose` when the attempt settles (clears the timer). A first read once the attempt is
   * over (disposed, or a later attempt or backoff began: work the handler left behind) gets a signal of its own,
   * aborted only if a stop came before: it never takes the place of the newest signal, which a stop must reach.
   */
  attempt(timeoutMs: number, timeoutReason: () => Error): AttemptSignal {
    return new LazyAttemptSignal(this, Date.now() + timeoutMs, ++this.generation, timeoutReason);
  }

  /**
   * Whether the attempt numbered `generation` is the newest (no later attempt or backoff began). For attempt signals.
   */
  isNewest(generation: number): boolean {
    return generation === this.generation;
  }

  /** A controller for the newest attempt: the one a stop aborts from now on. For attempt signals. */
  newest(): AbortController {
    return (this.current = this.fresh());
  }

  /**
   * A controller for an attempt that is over: aborted only if a stop came before; a stop does not reach it. For
   * attempt signals.
   */
  late(): AbortController {
    return this.fresh();
  }

  /** Called with the reason on {@link stop} (set by {@link onStop}). */
  private stopListener?: (reason: unknown) => void;

  /**
   * Calls `f` with the reason when the attempts stop (at once if they have): a plain callback, for a wait that needs
   * no AbortSignal of its own (a place in the handler-slot line). One at a time; returns the function that removes it.
   */
  onStop(f: (reason: unknown) => void): () => void {
    if (this.stopped) {
      f(this.reason);
      return () => undefined;
    }
    // One wait at a time per task (its attempts run one after another): a second would silently drop the first.
    if (this.stopListener) throw new Error('AttemptSignals.onStop: a stop callback is already registered');
    this.stopListener = f;
    return () => {
      if (this.stopListener === f) this.stopListener = undefined;
    };
  }

  stop(reason: unknown): void {
    if (this.stopped) return;
    this.stopped = true;
    this.reason = reason;
    this.current?.abort(reason);
    this.stopListener?.(reason);
  }
}

/** The signal of one attempt (see {@link AttemptSignals.attempt}): one object, its controller and timer made on first read. */
class LazyAttemptSignal implements AttemptSignal {
  private ac?: AbortController;
  private timer?: NodeJS.Timeout;
  private disposed = false;

  constructor(
    private readonly of: AttemptSignals,
    /** The attempt's deadline, ms since epoch. */
    private readonly deadline: number,
    /** The attempt's number among its task's attempts and backoffs. */
    private readonly generation: number,
    private readonly timeoutReason: () => Error,
  ) {}

  get signal(): AbortSignal {
    if (this.ac) return this.ac.signal;
    if (this.disposed || !this.of.isNewest(this.generation)) return (this.ac = this.of.late()).signal;
    const ac = (this.ac = this.of.newest());
    if (!ac.signal.aborted) {
      const left = this.deadline - Date.now();
      if (left <= 0) ac.abort(this.timeoutReason());
      else this.timer = setTimeout(() => ac.abort(this.timeoutReason()), left);
    }
    return ac.signal;
  }

  dispose(): void {
    this.disposed = true;
    clearTimeout(this.timer);
  }
}

/**
 * Calls each function registered on a signal once when that signal aborts, through one listener per signal however
 * many functions are registered. Many tasks in flight wait on one signal (their partition's revocation, their
 * consumer's drain), and an AbortSignal's `removeEventListener` walks its listeners: with a listener per task, each
 * task's removal was linear in the tasks in flight. A function that throws does not keep the others from being
 * called; its error is rethrown in a microtask (uncaught, as from an event listener).
 */
export class AbortFanout {
  private readonly bySignal = new WeakMap<AbortSignal, Set<() => void>>();

  /** Registers `f` (called at once if `signal` has aborted); returns the function that unregisters it. */
  on(signal: AbortSignal, f: () => void): () => void {
    if (signal.aborted) {
      f();
      return () => undefined;
    }
    let fs = this.bySignal.get(signal);
    if (!fs) {
      const all = (fs = new Set());
      this.bySignal.set(signal, all);
      signal.addEventListener(
        'abort',
        () => {
          this.bySignal.delete(signal);
          for (const g of all)
            try {
              g();
            } catch (e) {
              queueMicrotask(() => {
                throw e;
              });
            }
          all.clear();
        },
        { once: true },
      );
    }
    // A wrapper per registration: the same function registered twice is called twice, and removed once each.
    const entry = () => f();
    fs.add(entry);
    const set = fs;
    return () => void set.delete(entry);
  }
}
