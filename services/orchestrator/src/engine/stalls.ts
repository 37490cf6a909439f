/**
 * The partitions whose oldest input batch has waited longer than `boundMs` to be committed, with how long (ms):
 * `waiting` maps a partition to, per input topic, since when (ms since epoch) a batch of it waits. Partitions in
 * ascending order. What /health names as `PARTITION_STALLED` (ORCHESTRATOR_PARTITION_STALL_MS).
 */
export function stalledPartitions(
  waiting: Iterable<[number, ReadonlyMap<string, number>]>,
  now: number,
  boundMs: number,
): Array<{ partition: number; waitedMs: number }> {
  const out: Array<{ partition: number; waitedMs: number }> = [];
  for (const [partition, since] of waiting) {
    if (since.size === 0) continue;
    const waitedMs = now - Math.min(...since.values());
    if (waitedMs > boundMs) out.push({ partition, waitedMs });
  }
  return out.sort((a, b) => a.partition - b.partition);
}

/** The /health condition id of a stalled partition. */
export const stallConditionId = (partition: number) => `engine/partition-${partition}/stalled`;
