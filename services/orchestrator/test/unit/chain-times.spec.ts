import fc from 'fast-check';
import { CHAIN_ACCURACY, CHAIN_SLICE_MS, CHAIN_WINDOW_MS, ChainTimes } from '../../src/engine/chain-times';

/** The exact nearest-rank value at `q` of `times` (the smallest with at least q of them at or below it). */
const nearestRank = (times: number[], q: number) =>
  [...times].sort((a, b) => a - b)[Math.max(1, Math.ceil(q * times.length)) - 1];
/** What CHAIN_ACCURACY allows around `want` ms, values being rounded to the ms. */
const close = (got: number | null | undefined, want: number) =>
  got !== null && got !== undefined && Math.abs(got - want) <= Math.max(1, Math.ceil(want * CHAIN_ACCURACY));

const NOW = 1_800_000_000_000;

/**
 * GET /ops/overview's chain times are read on the engine's event loop: they must cost buckets, never the runs that
 * ended in the hour (a sort of 5.4 million chain times, an hour at 1,500 runs/s, held the loop 4.5 s a call).
 */
describe('ChainTimes: chain-time quantiles of the last hour that cost buckets, not runs', () => {
  it('p50 and p95 are the nearest-rank values within the stated accuracy, and the count is exact', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: CHAIN_WINDOW_MS }), { minLength: 1, maxLength: 400 }),
        (times) => {
          const c = new ChainTimes();
          for (const ms of times) c.add('w', NOW - 1_000, ms, NOW);
          const f = c.figures(NOW).get('w')!;
          expect(f.ended).toBe(times.length);
          expect(close(f.p50Ms, nearestRank(times, 0.5))).toBe(true);
          expect(close(f.p95Ms, nearestRank(times, 0.95))).toBe(true);
        },
      ),
    );
  });

  it('a removed run counts no more: adding then removing some leaves what the others alone give', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            ms: fc.integer({ min: 0, max: 100_000 }),
            gone: fc.boolean(),
            wf: fc.constantFrom('a', 'b'),
          }),
          {
            maxLength: 200,
          },
        ),
        (runs) => {
          const c = new ChainTimes();
          const kept = new ChainTimes();
          runs.forEach((r, i) => {
            const at = NOW - (i % 50) * CHAIN_SLICE_MS;
            c.add(r.wf, at, r.ms, NOW);
            if (!r.gone) kept.add(r.wf, at, r.ms, NOW);
          });
          runs.forEach((r, i) => r.gone && c.remove(r.wf, NOW - (i % 50) * CHAIN_SLICE_MS, r.ms));
          expect(c.figures(NOW)).toEqual(kept.figures(NOW));
        },
      ),
    );
  });

  it('counts the runs that ended in the last hour, to the minute, and forgets the minutes that leave it', () => {
    const c = new ChainTimes();
    c.add('w', NOW - 2 * CHAIN_WINDOW_MS, 5, NOW); // before the window: never counted
    c.add('w', NOW - CHAIN_WINDOW_MS + CHAIN_SLICE_MS, 10, NOW);
    c.add('w', NOW - 30 * CHAIN_SLICE_MS, 20, NOW);
    c.add('w', NOW - 90 * CHAIN_SLICE_MS, 30, NOW); // late and out of the window
    c.add('w', NOW - 45 * CHAIN_SLICE_MS, 40, NOW); // late: an earlier minute after a later one
    expect(c.figures(NOW).get('w')?.ended).toBe(3);
    // 20 minutes on, the first minute has left the window (the late one too, kept in order).
    expect(c.figures(NOW + 20 * CHAIN_SLICE_MS).get('w')?.ended).toBe(1);
    expect(c.figures(NOW + 2 * CHAIN_WINDOW_MS).size).toBe(0);
    expect(c.buckets).toBe(0);
  });

  it("never holds a minute again once it left the window, so a removal cannot take a later run's count", () => {
    const c = new ChainTimes();
    const gone = NOW - CHAIN_WINDOW_MS - 30_000; // the minute before the window at NOW
    c.add('w', gone, 10, NOW); // not counted: before the window
    // The clock steps back two minutes: the minute would be in the window again, but it left it already.
    c.add('w', gone, 10, NOW - 2 * CHAIN_SLICE_MS);
    c.add('w', NOW - 60_000, 12, NOW - 2 * CHAIN_SLICE_MS);
    c.remove('w', gone, 10); // the first run, forgotten: takes nothing
    expect(c.figures(NOW - 2 * CHAIN_SLICE_MS).get('w')).toEqual({ ended: 1, p50Ms: 12, p95Ms: 12 });
  });

  it('a run without a start (a chain time that is no number) is not counted, nor taken back', () => {
    const c = new ChainTimes();
    c.add('w', NOW, Number.NaN, NOW);
    c.add('w', NOW, 5, NOW);
    c.remove('w', NOW, Number.NaN);
    expect(c.figures(NOW).get('w')).toEqual({ ended: 1, p50Ms: 5, p95Ms: 5 });
  });

  it('holds buckets, not runs: 100,000 runs of one workflow in one minute take a few dozen', () => {
    const c = new ChainTimes();
    for (let i = 0; i < 100_000; i++) c.add('orders', NOW, 200 + (i % 300), NOW);
    expect(c.buckets).toBeLessThanOrEqual(60);
    expect(c.figures(NOW).get('orders')?.ended).toBe(100_000);
  });
});
