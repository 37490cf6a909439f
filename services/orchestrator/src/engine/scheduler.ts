import { CronExpressionParser } from 'cron-parser';
import { DateTime } from 'luxon';
import { isKeyflowError } from '@keyflow/errors';
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

/**
 * The scheduler's run id name space: every scheduled run id starts with it, and the API refuses caller-chosen run
 * ids that do (a caller could otherwise claim a future fire).
 */
export const SCHEDULED_RUN_PREFIX = 'sched-';

/** Run id of a schedule's fire: the same on every instance, so two instances start one run per fire time. */
export const scheduledRunId = (scheduleId: string, fireAtMs: number) =>
  `${SCHEDULED_RUN_PREFIX}${scheduleId}-${fireAtMs}`;

/** What the scheduler starts, at startup, for fires that fell while no instance was running. */
export const CATCH_UP_MODES = ['skip', 'once', 'all'] as const;
export interface CatchUp {
  /** skip: none; once: only the latest missed fire; all: every missed fire in the window, at most `max`. */
  mode: (typeof CATCH_UP_MODES)[number];
  /** How far back (ms) a missed fire is looked for. Default 60 000. */
  windowMs?: number;
  /** `all`: at most this many fires (the latest ones). Default 100. */
  max?: number;
}

const HOUR_MS = 3_600_000;

/** The zone's UTC offset at instant `ms`, in ms. */
const offsetAt = (ms: number, zone: string) => DateTime.fromMillis(ms, { zone }).offset * 60_000;

/** The zone's UTC offsets (ms) during [fromMs, untilMs], sampled hourly (offsets change at most so often). */
function offsetsDuring(fromMs: number, untilMs: number, zone: string): number[] {
  const out = new Set<number>();
  for (let t = fromMs; t < untilMs; t += HOUR_MS) out.add(offsetAt(t, zone));
  out.add(offsetAt(untilMs, zone));
  return [...out].sort((a, b) => a - b);
}

/**
 * Instants at which the wall-clock time `wall` (ms of a local time read as if it were UTC) happens in `zone`,
 * given the offsets around it: none in a gap (spring forward), two in a repeated hour (fall back), else one.
 */
function instantsOf(wall: number, zone: string, offsets: number[]): number[] {
  if (offsets.length === 1) return [wall - offsets[0]];
  return offsets
    .map((o) => wall - o)
    .filter((t) => offsetAt(t, zone) === wall - t)
    .sort((a, b) => a - b);
}

/** The first instant after the gap that swallows wall time `wall`: where the zone's offset changes. */
function endOfGap(wall: number, zone: string, offsets: number[]): number {
  let lo = wall - offsets[offsets.length - 1];
  let hi = wall - offsets[0];
  const before = offsetAt(lo, zone);
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (offsetAt(mid, zone) === before) lo = mid;
    else hi = mid;
  }
  return hi;
}

/**
 * Vixie cron's rule: a schedule whose second (6 fields), minute or hour field starts with `*` is an interval
 * schedule and fires by elapsed real time (each instant whose local time matches); any other is a fixed-time one.
 */
function isInterval(cron: string): boolean {
  const f = cron.trim().split(/\s+/);
  const timeFields = f.length >= 6 ? f.slice(0, 3) : f.slice(0, 2);
  return timeFields.some((x) => x.startsWith('*'));
}

/**
 * Fire times (ms) of a schedule in (afterMs, untilMs], ascending, each at most once. The cron fields are matched
 * against the local wall-clock time of `timezone` (cron-parser, over wall time), then each wall time is placed:
 * - fixed-time schedules (e.g. `30 2 * * *`): a time in a spring-forward gap fires once at the first instant after
 *   the gap (03:00 new time); a time in a fall-back hour fires once, at its first occurrence; as in Vixie cron.
 * - interval schedules (`*` or `*\/n` in the second, minute or hour field): every real instant whose local time
 *   matches, so they keep their real-time pace through both changes, never twice for one instant.
 * The result depends only on the window, never on how it is cut into ticks.
 * @throws Error naming the schedule on a bad expression or an unknown time zone.
 */
export function fireTimes(s: ScheduleDef, afterMs: number, untilMs: number, max = 1000): number[] {
  const zone = s.timezone ?? 'UTC';
  if (!DateTime.local().setZone(zone).isValid)
    throw new Error(`schedule ${s.id}: unknown time zone ${JSON.stringify(zone)}`);
  // Offsets within 3 h of the window tell a repeated or skipped wall time (DST shifts are at most 2 h); the wall
  // times looked at are only those the window's own offsets can place in it.
  const offsets = offsetsDuring(afterMs - 3 * HOUR_MS, untilMs + 3 * HOUR_MS, zone);
  const inWindow = offsetsDuring(afterMs, untilMs, zone);
  let it;
  try {
    // Wall-clock times, read as UTC: the zone's offsets are applied below.
    const startWall = afterMs + inWindow[0] - 1;
    it = CronExpressionParser.parse(s.cron, { tz: 'UTC', currentDate: new Date(startWall) });
  } catch (e) {
    throw new Error(`schedule ${s.id}: invalid cron ${JSON.stringify(s.cron)}: ${(e as Error).message}`);
  }
  const interval = isInterval(s.cron);
  const untilWall = untilMs + inWindow[inWindow.length - 1];
  const out = new Set<number>();
  for (;;) {
    const wall = it.next().getTime();
    if (wall > untilWall) break;
    const at = instantsOf(wall, zone, offsets);
    const placed = interval ? at : at.length ? [at[0]] : [endOfGap(wall, zone, offsets)];
    for (const t of placed) if (t > afterMs && t <= untilMs) out.add(t);
    if (out.size >= max) break;
  }
  return [...out].sort((a, b) => a - b).slice(0, max);
}

/**
 * Starts the runs of cron schedules. Every instance runs it; the run id of a fire is derived from the schedule
 * and the fire time, so duplicates from several instances (or a restart) are the same run, which the engine
 * starts once. At its first tick it starts the fires missed while down as `catchUp` says (default: all in the last
 * 60 s, at most 100); after that, every fire since the previous tick.
 */
export class Scheduler {
  private timer?: NodeJS.Timeout;
  private checkedUntil?: number;
  private readonly startedAt: number;

  constructor(
    private readonly schedules: ScheduleDef[],
    private readonly start: (s: ScheduleDef, runId: string, fireAtMs: number) => Promise<unknown>,
    private readonly logger: Logger,
    private readonly opts: { tickMs?: number; catchUp?: CatchUp; now?: () => number } = {},
  ) {
    schedules.forEach((s) => fireTimes(s, 0, 0)); // validate expressions and zones at startup
    this.startedAt = this.now();
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

  /**
   * The fires of `s` in (from, until]; at the first tick, those since the scheduler was created, after the fires
   * missed before it (in the catch-up window) that the catch-up setting keeps.
   */
  private due(s: ScheduleDef, from: number | undefined, until: number): number[] {
    if (from !== undefined) return fireTimes(s, from, until);
    const c = this.opts.catchUp ?? { mode: 'all' };
    const since = this.startedAt;
    const missed = fireTimes(s, since - (c.windowMs ?? 60_000), since, Number.MAX_SAFE_INTEGER);
    const now = fireTimes(s, since, until);
    const kept =
      c.mode === 'skip' ? [] : c.mode === 'once' ? missed.slice(-1) : missed.slice(-(c.max ?? 100));
    if (kept.length < missed.length)
      this.logger.warn(
        { schedule: s.id, missed: missed.length, started: kept.length, catchUp: c.mode },
        'fires missed while down are not all started (catch-up setting)',
      );
    return [...kept, ...now];
  }

  /** Starts every fire due since the last tick. Exposed for tests. */
  async tick(): Promise<number> {
    const until = this.now();
    const from = this.checkedUntil;
    let started = 0;
    for (const s of this.schedules) {
      for (const at of this.due(s, from, until)) {
        try {
          await this.start(s, scheduledRunId(s.id, at), at);
          started++;
        } catch (err) {
          if (isKeyflowError(err) && !err.retryable) {
            // keyflow refused the request for good (a bad input, an unknown workflow): the same request is refused
            // the same way at every tick, so this fire is skipped and the schedules after it still run. Anything
            // else (a broker or Redis outage, kafkajs giving up its retries) is retried at the next tick.
            this.logger.error(
              { err, schedule: s.id, fireAt: at },
              'a scheduled run was refused; this fire is skipped',
            );
            continue;
          }
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
