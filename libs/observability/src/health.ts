import type { Logger } from './logger';

/** A component that stopped for good, as /health reports it. `at` is ms since epoch. */
export interface ComponentFailure {
  component: string;
  error: string;
  /** The error's `code` when it has one (see libs/contracts errors), else its class name. */
  code: string;
  at: number;
}

/** A condition that keeps a process working but not wholly, as /health reports it (see ComponentHealth.degrade). */
export interface DegradedCondition {
  id: string;
  code: string;
  error: string;
  at: number;
}

/**
 * What a process knows about the parts that must keep running (a consumer, a producer, the read model): each one
 * that fails for good is recorded here, /health answers 503 naming it, and the listeners (see
 * {@link exitOnComponentFailure}) make the process exit non-zero so a supervisor restarts it. A process must never
 * sit alive and idle with a dead consumer behind a 200.
 */
export class ComponentHealth {
  private readonly failed = new Map<string, ComponentFailure>();
  private listeners: Array<(f: ComponentFailure, err: Error) => void> = [];
  private readonly conditions = new Map<string, DegradedCondition>();

  /**
   * Records that `component` failed for good. The first failure of a component wins; listeners are called once
   * per component, synchronously.
   */
  fail(component: string, err: unknown): void {
    if (this.failed.has(component)) return;
    const e = err instanceof Error ? err : new Error(String(err));
    const f: ComponentFailure = {
      component,
      error: e.message,
      code: String((e as { code?: unknown }).code ?? e.name),
      at: Date.now(),
    };
    this.failed.set(component, f);
    this.listeners.forEach((l) => l(f, e));
  }

  /**
   * Records a condition that keeps the process working but not wholly (a partition paused on a batch it cannot
   * decode): /health answers 200 with `status: 'degraded'` and lists it, and no listener fires (the process must not
   * exit or restart over it: a restart meets the same condition). `id` names the condition (one per id; a later call
   * replaces it); {@link recover} clears it.
   */
  degrade(id: string, condition: { code: string; error: string }): void {
    this.conditions.set(id, { id, ...condition, at: this.conditions.get(id)?.at ?? Date.now() });
  }

  /** Clears the condition `id` (no-op when there is none). */
  recover(id: string): void {
    this.conditions.delete(id);
  }

  /** The degraded conditions, oldest first. `at` is ms since epoch. */
  degraded(): DegradedCondition[] {
    return [...this.conditions.values()];
  }

  onFailure(listener: (f: ComponentFailure, err: Error) => void): void {
    this.listeners.push(listener);
  }

  get healthy(): boolean {
    return this.failed.size === 0;
  }

  /** The failed components, in the order they failed. */
  failures(): ComponentFailure[] {
    return [...this.failed.values()];
  }
}

/**
 * How long a process whose component failed for good keeps answering /health with 503 before it exits, in ms:
 * long enough for a probe or a scrape to see why, short enough for a supervisor to restart it soon. Override with
 * KEYFLOW_FATAL_EXIT_DELAY_MS.
 */
export const FATAL_EXIT_DELAY_MS = 2_000;

/**
 * On the first component failure: logs it at fatal level and exits the process with code 1 after
 * `delayMs` (default KEYFLOW_FATAL_EXIT_DELAY_MS from the environment, else {@link FATAL_EXIT_DELAY_MS}).
 */
export function exitOnComponentFailure(
  health: ComponentHealth,
  logger: Logger,
  delayMs = Number(process.env.KEYFLOW_FATAL_EXIT_DELAY_MS ?? FATAL_EXIT_DELAY_MS),
): void {
  let exiting = false;
  health.onFailure((f, err) => {
    logger.fatal({ err, component: f.component, code: f.code }, `${f.component} failed for good; exiting`);
    if (exiting) return;
    exiting = true;
    setTimeout(() => process.exit(1), Math.max(0, delayMs));
  });
}

/**
 * On the first SIGTERM or SIGINT (a second one is ignored): logs `message`, runs `close` (drain and disconnect),
 * then exits 0, or 1 when `close` fails (logged). Used instead of NestJS's shutdown hooks, which re-raise the signal.
 */
export function exitOnSignals(logger: Logger, message: string, close: () => Promise<unknown>): void {
  let closing = false;
  for (const signal of ['SIGTERM', 'SIGINT'] as const)
    process.once(signal, () => {
      if (closing) return;
      closing = true;
      logger.info({ signal }, message);
      close().then(
        () => process.exit(0),
        (err) => {
          logger.error({ err }, 'shutdown failed');
          process.exit(1);
        },
      );
    });
}
