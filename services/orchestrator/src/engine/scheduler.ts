import { CronExpressionParser } from 'cron-parser';
import type { Logger } from '@keyflow/observability';

/** A cron schedule that starts a workflow. `cron` has 5 fields, or 6 with seconds first (cron-parser syntax). */
export interface ScheduleDef {
  id: string;
  workflow: string;
  cron: string;
  /** IANA time zone the cron fields are read in (default UTC), e.g. Europe/Paris: DST shifts follow it. */
  timezone?: string;
  input?: Record<string, unknown>;
}

/** Run id of a schedule's fire: the same on every instance, so two instances start one run per fire time. */
export const scheduledRunId = (scheduleId: string, fireAtMs: number) => `sched-${scheduleId}-${fireAtMs}`;

/** Fire times (ms) of `cron` in (afterMs, untilMs], in order. @throws Error naming the schedule on a bad expression. */
export function fireTimes(s: ScheduleDef, afterMs: number, untilMs: number, max = 1000): number[] {
  let it;
  try {
    it = CronExpressionParser.parse(s.cron, { tz: s.timezone ?? 'UTC', currentDate: new Date(afterMs) });
  } catch (e) {
    throw new Error(`schedule ${s.id}: invalid cron ${JSON.stringify(s.cron)}: ${(e as Error).message}`);
  }
  const out: number[] = [];
  while (out.length < max) {
    const t = it.next().getTime();
    if (t > untilMs) break;
    out.push(t);
  }
  return out;
}

/**
 * Starts the runs of cron schedules. Every instance runs it; the run id of a fire is derived from the schedule
 * and the fire time, so duplicates from several instances (or a restart) are the same run, which the engine
 * starts once. On start it catches up fires missed in the last `catchUpMs`.
 */
export class Scheduler {
  private timer?: NodeJS.Timeout;
  private checkedUntil: number;

  constructor(
    private readonly schedules: ScheduleDef[],
    private readonly start: (s: ScheduleDef, runId: string, fireAtMs: number) => Promise<unknown>,
    private readonly logger: Logger,
    private readonly opts: { tickMs?: number; catchUpMs?: number; now?: () => number } = {},
  ) {
    schedules.forEach((s) => fireTimes(s, 0, 0)); // validate expressions at startup
    this.checkedUntil = this.now() - (opts.catchUpMs ?? 60_000);
  }

  private now(): number {
    return (this.opts.now ?? Date.now)();
  }

  startTicking(): void {
    if (!this.schedules.length) return;
    this.timer = setInterval(() => void this.tick(), this.opts.tickMs ?? 250);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Starts every fire due since the last tick. Exposed for tests. */
  async tick(): Promise<number> {
    const until = this.now();
    const from = this.checkedUntil;
    let started = 0;
    for (const s of this.schedules) {
      for (const at of fireTimes(s, from, until)) {
        try {
          await this.start(s, scheduledRunId(s.id, at), at);
          started++;
        } catch (err) {
          this.logger.warn(
            { err, schedule: s.id, fireAt: at },
            'could not start a scheduled run; retrying at the next tick',
          );
          return started; // checkedUntil stays: the fire is retried
        }
      }
    }
    this.checkedUntil = until;
    return started;
  }
}
