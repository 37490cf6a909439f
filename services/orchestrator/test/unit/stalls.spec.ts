import { stalledPartitions } from '../../src/engine/stalls';

describe('/health names a partition whose inputs wait uncommitted longer than ORCHESTRATOR_PARTITION_STALL_MS', () => {
  const waiting = (entries: Array<[number, Record<string, number>]>) =>
    entries.map(([p, by]) => [p, new Map(Object.entries(by))] as [number, Map<string, number>]);

  it('names only the partitions over the bound, by their oldest waiting batch', () => {
    expect(
      stalledPartitions(
        waiting([
          [3, { 'wf.requests': 1_000, 'task.results': 9_000 }],
          [0, { 'wf.requests': 9_500 }],
          [1, {}],
          [2, { 'task.results': 4_000 }],
        ]),
        10_000,
        5_000,
      ),
    ).toEqual([
      { partition: 2, waitedMs: 6_000 },
      { partition: 3, waitedMs: 9_000 },
    ]);
  });

  it('a partition at exactly the bound, or idle, is not stalled', () => {
    expect(
      stalledPartitions(
        waiting([
          [0, { t: 5_000 }],
          [1, {}],
        ]),
        10_000,
        5_000,
      ),
    ).toEqual([]);
  });
});
