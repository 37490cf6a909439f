import fc from 'fast-check';
import type { ParkedInput, RunState } from '@keyflow/workflow';
import { parkedSummary } from '../../src/engine/engine';
import { OrderedMap } from '@js-sdsl/ordered-map';
import { dropRun, endedKey, holdRun, type OwnedPartition } from '../../src/engine/ownership';
import { expiredRuns } from '../../src/engine/retention';
import { RunCounts } from '../../src/engine/run-counts';

/** A Map of runs that can be looked up but never walked: a scan of every owned run throws. */
class NoScan extends Map<string, RunState> {
  override values(): never {
    throw new Error('scanned every owned run');
  }
  override entries(): never {
    throw new Error('scanned every owned run');
  }
  override keys(): never {
    throw new Error('scanned every owned run');
  }
  override forEach(): never {
    throw new Error('scanned every owned run');
  }
  override [Symbol.iterator](): never {
    throw new Error('scanned every owned run');
  }
}

/** A partition with `runs` and the indexes holdRun and dropRun keep beside them, empty. */
const indexedPartition = (runs: Map<string, RunState>) =>
  ({
    runs,
    parked: new Set<string>(),
    timed: new Set<string>(),
    ended: new OrderedMap<string, string>(),
    counts: new RunCounts(),
    traces: new Map(),
  }) as unknown as OwnedPartition;

/**
 * /health (INPUTS_PARKED) and the parked-inputs gauge name the owned runs holding parked inputs once a second and per
 * scrape: that costs the parked runs, not every run the instance owns (ended runs stay owned until their retention,
 * so a scan grows with days of history on the engine's event loop).
 */
describe('parkedSummary: the runs holding parked inputs, by the definition they wait for', () => {
  const parked = (n: number) => Array.from({ length: n }, () => ({ kind: 'signal' }) as ParkedInput);
  const run = (runId: string, workflow: string, version: number, held = 0) =>
    ({ runId, workflow, version, ...(held ? { parked: parked(held) } : {}) }) as RunState;

  it('looks up only the parked runs of 100,000 owned ones, and passes over one that holds none any more', () => {
    const runs = new NoScan();
    for (let i = 0; i < 100_000; i++) runs.set(`r${i}`, run(`r${i}`, 'orders', 1));
    runs.set('p1', run('p1', 'approval', 2, 3));
    runs.set('p2', run('p2', 'approval', 2, 1));
    runs.set('p3', run('p3', 'billing', 1, 2));
    const other = new NoScan([['q1', run('q1', 'approval', 2, 4)]]);
    const summary = parkedSummary([
      { runs, parked: new Set(['p1', 'p2', 'p3', 'r7']) }, // r7: unparked since (the set is kept as runs change)
      { runs: other, parked: new Set(['q1', 'gone']) },
    ]);
    expect(Object.fromEntries(summary)).toEqual({
      'approval@2': { workflow: 'approval', version: '2', runs: 3, inputs: 8 },
      'billing@1': { workflow: 'billing', version: '1', runs: 1, inputs: 2 },
    });
  });
});

/**
 * The orchestrator_runs gauge (runs by workflow and status) is read at each scrape from counts kept as a partition's
 * runs change, so a scrape costs the distinct workflows and statuses: the counts and the parked set must always say
 * what a scan of the runs would.
 */
describe("the indexes kept beside a partition's runs (holdRun, dropRun)", () => {
  const STATUSES = ['running', 'waiting', 'completed', 'failed'] as const;
  const op = fc.record({
    drop: fc.boolean(),
    run: fc.integer({ min: 0, max: 30 }),
    workflow: fc.constantFrom('a', 'b'),
    status: fc.constantFrom(...STATUSES),
    parked: fc.integer({ min: 0, max: 2 }),
    timers: fc.integer({ min: 0, max: 2 }),
    at: fc.integer({ min: 0, max: 1_000 }),
  });

  it('after any sequence of commits and drops, the counts, the parked runs and the runs with timers are what a scan of the runs gives', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const o = indexedPartition(new Map());
        for (const x of ops) {
          const runId = `r${x.run}`;
          if (x.drop) dropRun(o, runId);
          else
            holdRun(o, {
              runId,
              workflow: x.workflow,
              status: x.status,
              updatedAt: x.at,
              ...(x.status === 'completed' || x.status === 'failed' ? { endedAt: x.at } : {}),
              timers: Object.fromEntries(
                Array.from({ length: x.timers }, (_, i) => [`t${i}`, { dueAt: i, purpose: 'retry' }]),
              ),
              ...(x.parked ? { parked: new Array(x.parked).fill({ kind: 'signal' }) } : {}),
            } as RunState);
        }
        const scanned = new Map<string, number>();
        for (const s of o.runs.values())
          scanned.set(`${s.workflow}/${s.status}`, (scanned.get(`${s.workflow}/${s.status}`) ?? 0) + 1);
        const counted = new Map([...o.counts.values()].map((c) => [`${c.workflow}/${c.status}`, c.count]));
        expect(counted).toEqual(scanned);
        expect([...o.parked].sort()).toEqual(
          [...o.runs.values()]
            .filter((s) => s.parked?.length)
            .map((s) => s.runId)
            .sort(),
        );
        expect([...o.timed].sort()).toEqual(
          [...o.runs.values()]
            .filter((s) => Object.keys(s.timers).length > 0)
            .map((s) => s.runId)
            .sort(),
        );
        const ended: string[] = [];
        for (let it = o.ended.begin(); !it.equals(o.ended.end()); it.next()) ended.push(it.pointer[1]);
        const byEnd = [...o.runs.values()]
          .filter((s) => s.status === 'completed' || s.status === 'failed')
          .sort((a, b) => a.endedAt! - b.endedAt! || (a.runId < b.runId ? -1 : 1));
        expect(ended).toEqual(byEnd.map((s) => s.runId));
        return true;
      }),
      { numRuns: 300 },
    );
  });
});

/**
 * A retention sweep runs every minute on the engine's event loop: it must cost the runs it forgets, not the runs held
 * (ended runs stay owned for days; a scan of a partition's 100 million runs to find a thousand took seconds a sweep).
 */
describe('expiredRuns: the runs past their retention, read from the front of the ended-runs index', () => {
  const ended = (runId: string, at: number) =>
    ({
      runId,
      workflow: 'w',
      status: 'completed',
      steps: {},
      timers: {},
      updatedAt: at,
      endedAt: at,
    }) as RunState;

  it('finds the expired runs of 100,000 held without walking them, oldest first, within the bounds of a transaction', () => {
    const o = indexedPartition(new NoScan());
    for (let i = 0; i < 100_000; i++)
      holdRun(o, { ...ended(`r${i}`, 10_000 + i), status: 'running', endedAt: undefined });
    for (let i = 0; i < 1_500; i++) holdRun(o, ended(`r${i}`, 5_000 - i)); // 1,500 of them ended, the later ids first
    holdRun(o, ended('late', 9_000)); // ended after the cutoff
    const expired = (s: RunState | undefined) =>
      s !== undefined && s.status === 'completed' && s.endedAt! <= 8_000;
    const first = expiredRuns(o, 8_000, expired);
    expect(first.more).toBe(true);
    expect(first.runIds).toHaveLength(1_000);
    expect(first.runIds[0]).toBe('r1499'); // ended first (at 3,501)
    first.runIds.forEach((id) => dropRun(o, id));
    expect(expiredRuns(o, 8_000, expired)).toEqual({
      runIds: Array.from({ length: 500 }, (_, i) => `r${499 - i}`),
      more: false,
    });
    expect(endedKey(ended('x', 42))).toBe('0000000000000042/x');
  });
});
