import type { ParkedInput, RunState } from '@keyflow/workflow';
import { parkedSummary } from '../../src/engine/engine';

/**
 * /health (INPUTS_PARKED) and the parked-inputs gauge name the owned runs holding parked inputs once a second and per
 * scrape: that costs the parked runs, not every run the instance owns (ended runs stay owned until their retention,
 * so a scan grows with days of history on the engine's event loop).
 */
describe('parkedSummary: the runs holding parked inputs, by the definition they wait for', () => {
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
