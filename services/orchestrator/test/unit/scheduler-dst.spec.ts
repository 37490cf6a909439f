import { createLogger } from '@keyflow/observability';
import {
  fireTimes,
  Scheduler,
  SCHEDULED_RUN_PREFIX,
  type CatchUp,
  type ScheduleDef,
} from '../../src/engine/scheduler';

const MINUTE = 60_000;
const iso = (ms: number) => new Date(ms).toISOString();
const silent = createLogger('t', { level: 'silent' });

/**
 * Drives a Scheduler's clock from `fromIso` to `untilIso`, ticking every `stepMs` (as the service does, a new
 * window per tick), and returns the fire times it started, in order (duplicates included).
 */
async function driven(
  s: ScheduleDef,
  fromIso: string,
  untilIso: string,
  stepMs = 10 * MINUTE,
): Promise<string[]> {
  let now = Date.parse(fromIso);
  const fired: string[] = [];
  const sched = new Scheduler([s], async (_s, _runId, at) => void fired.push(iso(at)), silent, {
    now: () => now,
    catchUp: { mode: 'skip' },
  });
  const until = Date.parse(untilIso);
  while (now < until) {
    now += stepMs;
    await sched.tick();
  }
  return fired;
}

describe('cron schedules across daylight-saving changes (Vixie cron rule)', () => {
  it('Europe/Berlin 2026-03-29: a daily time in the skipped hour fires once, at 03:00 CEST, the first instant after the gap', async () => {
    const s = { id: 'd', workflow: 'w', cron: '30 2 * * *', timezone: 'Europe/Berlin' };
    const expected = ['2026-03-28T01:30:00.000Z', '2026-03-29T01:00:00.000Z', '2026-03-30T00:30:00.000Z'];
    expect(await driven(s, '2026-03-27T12:00:00Z', '2026-03-30T12:00:00Z')).toEqual(expected);
    expect(
      fireTimes(s, Date.parse('2026-03-27T12:00:00Z'), Date.parse('2026-03-30T12:00:00Z')).map(iso),
    ).toEqual(expected);
  });

  it('Europe/Berlin 2026-10-25: a daily time in the repeated hour fires once, at its first occurrence (CEST)', async () => {
    const s = { id: 'd', workflow: 'w', cron: '30 2 * * *', timezone: 'Europe/Berlin' };
    expect(await driven(s, '2026-10-23T12:00:00Z', '2026-10-26T12:00:00Z')).toEqual([
      '2026-10-24T00:30:00.000Z',
      '2026-10-25T00:30:00.000Z',
      '2026-10-26T01:30:00.000Z',
    ]);
  });

  it('America/New_York 2026-03-08: a daily time in the skipped hour fires once, at 03:00 EDT', async () => {
    const s = { id: 'd', workflow: 'w', cron: '30 2 * * *', timezone: 'America/New_York' };
    expect(await driven(s, '2026-03-06T12:00:00Z', '2026-03-09T12:00:00Z')).toEqual([
      '2026-03-07T07:30:00.000Z',
      '2026-03-08T07:00:00.000Z',
      '2026-03-09T06:30:00.000Z',
    ]);
  });

  it('America/New_York 2026-11-01: a daily time in the repeated hour fires once, at its first occurrence (EDT)', async () => {
    const s = { id: 'd', workflow: 'w', cron: '30 1 * * *', timezone: 'America/New_York' };
    expect(await driven(s, '2026-10-30T12:00:00Z', '2026-11-02T12:00:00Z')).toEqual([
      '2026-10-31T05:30:00.000Z',
      '2026-11-01T05:30:00.000Z',
      '2026-11-02T06:30:00.000Z',
    ]);
  });

  it('two times inside the skipped hour fire once together at the end of the gap (one run per instant)', async () => {
    const s = { id: 'd', workflow: 'w', cron: '0,30 2 * * *', timezone: 'Europe/Berlin' };
    expect(await driven(s, '2026-03-28T12:00:00Z', '2026-03-29T12:00:00Z')).toEqual([
      '2026-03-29T01:00:00.000Z',
    ]);
  });

  it('an interval schedule fires every 15 real minutes across both changes, never twice for one instant', async () => {
    const s = { id: 'i', workflow: 'w', cron: '*/15 * * * *', timezone: 'Europe/Berlin' };
    const every15 = (fromIso: string, n: number) =>
      Array.from({ length: n }, (_, k) => iso(Date.parse(fromIso) + k * 15 * MINUTE));
    // Spring: 01:45 CET (00:45Z) is followed by 03:00 CEST (01:00Z), 15 minutes later.
    expect(await driven(s, '2026-03-29T00:20:00Z', '2026-03-29T01:50:00Z', 30_000)).toEqual(
      every15('2026-03-29T00:30:00Z', 6),
    );
    // Autumn: 02:00-02:45 happen twice (CEST then CET), eight distinct instants 15 minutes apart.
    expect(await driven(s, '2026-10-24T23:50:00Z', '2026-10-25T02:10:00Z', 30_000)).toEqual(
      every15('2026-10-25T00:00:00Z', 9),
    );
    const ny = { ...s, timezone: 'America/New_York' };
    expect(await driven(ny, '2026-11-01T05:20:00Z', '2026-11-01T07:20:00Z', 30_000)).toEqual(
      every15('2026-11-01T05:30:00Z', 8),
    );
    expect(await driven(ny, '2026-03-08T06:20:00Z', '2026-03-08T07:20:00Z', 30_000)).toEqual(
      every15('2026-03-08T06:30:00Z', 4),
    );
  });
  it("a per-second schedule ticked every 250 ms (the service's tick) through the autumn change fires once a second", async () => {
    const s = { id: 's', workflow: 'w', cron: '* * * * * *', timezone: 'Europe/Berlin' };
    const fired = await driven(s, '2026-10-25T00:59:00Z', '2026-10-25T01:01:00Z', 250);
    expect(fired).toEqual(
      Array.from({ length: 120 }, (_, k) => iso(Date.parse('2026-10-25T00:59:01Z') + k * 1000)),
    );
  });
});

describe('catch-up after downtime', () => {
  const s = { id: 'm', workflow: 'w', cron: '* * * * *' }; // every minute, UTC
  const now = Date.parse('2026-11-30T10:00:30Z');
  const run = async (opts: { catchUp: CatchUp }) => {
    const fired: string[] = [];
    const sched = new Scheduler([s], async (_s, _id, at) => void fired.push(iso(at)), silent, {
      now: () => now,
      ...opts,
    });
    await sched.tick();
    return fired;
  };

  it('skip starts none of the fires missed before startup', async () => {
    expect(await run({ catchUp: { mode: 'skip' } })).toEqual([]);
  });

  it('once starts only the latest missed fire', async () => {
    expect(await run({ catchUp: { mode: 'once', windowMs: 10 * MINUTE } })).toEqual([
      '2026-11-30T10:00:00.000Z',
    ]);
  });

  it('all starts every missed fire in the window, at most `max` (the latest ones), oldest first', async () => {
    expect(await run({ catchUp: { mode: 'all', windowMs: 10 * MINUTE, max: 3 } })).toEqual([
      '2026-11-30T09:58:00.000Z',
      '2026-11-30T09:59:00.000Z',
      '2026-11-30T10:00:00.000Z',
    ]);
    expect(await run({ catchUp: { mode: 'all', windowMs: 120_000, max: 100 } })).toEqual([
      '2026-11-30T09:59:00.000Z',
      '2026-11-30T10:00:00.000Z',
    ]);
  });
});

describe('the scheduler name space', () => {
  it('is one prefix, used for every scheduled run id', () => {
    expect(SCHEDULED_RUN_PREFIX).toBe('sched-');
  });
});
