import { RUN_LIST_SCAN_MAX, RunIndex } from '../../src/engine/run-index';

/**
 * Run listing (GET /runs, the CLI's `runs ls`, the console's runs panel polled every 2 s) reads an ordered index the
 * read model keeps as snapshots arrive (issue 39, fault 11): a page costs its own size (plus, with filters, a bounded
 * scan), never a copy and sort of every run on the engine's event loop.
 */
type R = { runId: string; startedAt: number; status: string };
const r = (runId: string, startedAt: number, status = 'running'): R => ({ runId, startedAt, status });

function filled(n: number): RunIndex<R> {
  const idx = new RunIndex<R>();
  for (let i = 0; i < n; i++)
    idx.set(`r${String(i).padStart(6, '0')}`, 1_000 + Math.floor(i / 3), r(`r${i}`, i));
  return idx;
}

describe('RunIndex: the read model ordered index of runs, newest first', () => {
  it('pages newest first (ties by run id) with a cursor: every run once, in order', () => {
    const idx = new RunIndex<R>();
    const runs = [r('b', 20), r('a', 20), r('c', 30), r('d', 10), r('e', 20)];
    for (const x of runs) idx.set(x.runId, x.startedAt, x);
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = idx.page({ limit: 2, cursor }, () => true);
      seen.push(...page.items.map((x) => x.runId));
      cursor = page.next;
    } while (cursor);
    expect(seen).toEqual(['c', 'a', 'b', 'e', 'd']);
  });

  it('keeps up with updates and deletes (a snapshot replaces a run, a tombstone removes it)', () => {
    const idx = new RunIndex<R>();
    idx.set('a', 10, r('a', 10));
    idx.set('b', 20, r('b', 20));
    idx.set('a', 10, r('a', 10, 'completed'));
    idx.set('b', 5, r('b', 5)); // moved (a start time that changed)
    expect(idx.page({ limit: 10 }, () => true).items.map((x) => [x.runId, x.status])).toEqual([
      ['a', 'completed'],
      ['b', 'running'],
    ]);
    idx.delete('a');
    idx.delete('nope');
    expect(idx.size).toBe(1);
    expect(idx.page({ limit: 10 }, () => true).items.map((x) => x.runId)).toEqual(['b']);
  });

  it('seeks to `to` and stops at `from` (start times in ms: from inclusive, to exclusive)', () => {
    const idx = filled(30); // start times 1000..1009, three runs each
    const page = idx.page({ limit: 100, from: 1_003, to: 1_005 }, () => true);
    // newest start time first, ties by run id; the values carry their insertion number
    expect(page.items.map((x) => x.startedAt)).toEqual([12, 13, 14, 9, 10, 11]);
    expect(page.next).toBeUndefined();
  });

  it('costs the page, not the number of runs: an unfiltered page of 50 of 200 000 runs looks at 51', () => {
    const idx = filled(200_000);
    let looked = 0;
    const page = idx.page({ limit: 50 }, () => (looked++, true));
    expect(page.items).toHaveLength(50);
    expect(looked).toBeLessThanOrEqual(51);
    const next = idx.page({ limit: 50, cursor: page.next }, () => true);
    expect(next.items[0].runId).not.toBe(page.items.at(-1)!.runId);
  });

  it('a filter that matches little stops after a bounded scan and hands back a cursor to go on from', () => {
    const idx = filled(3 * RUN_LIST_SCAN_MAX);
    let looked = 0;
    const page = idx.page({ limit: 50 }, () => (looked++, false));
    expect(looked).toBe(RUN_LIST_SCAN_MAX);
    expect(page.items).toEqual([]);
    expect(page.next).toBeDefined();
    let pages = 1;
    let cursor = page.next;
    while (cursor) {
      cursor = idx.page({ limit: 50, cursor }, () => false).next;
      pages++;
    }
    expect(pages).toBe(3);
  });
});
