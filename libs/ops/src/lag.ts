import { AssignerProtocol, type Kafka } from '@keyflow/kafka';
import { lastStableOffsets, resumePosition, scanRanges, type ScanRange } from './scan';

/** The lag of a consumer group on one partition. Offsets are Kafka offsets; times are ms since epoch. */
export interface PartitionLag {
  topic: string;
  partition: number;
  /** The group's committed offset, or null when it has none (its consumers would start at the earliest). */
  committed: string | null;
  /** The partition's last stable offset: what a read_committed consumer can reach now. */
  end: string;
  /**
   * Records a read_committed consumer would still be given before it reaches `end`: transaction markers and
   * records of aborted transactions are not counted (Kafka's own tools count them, so a transactional topic shows a
   * lag of 1 where nothing is left to read). Exact when `exact`; otherwise `end - position`, an upper bound.
   */
  lag: number;
  exact: boolean;
  /** Age (ms, against `now`) of the oldest record the group has not consumed, by its timestamp; null when none. */
  oldestAgeMs: number | null;
}

/** Name prefixes of the short-lived consumer groups the scans of this module use (hidden from group lists). */
export const SCAN_GROUP_PREFIXES = [
  'keyflow-scan',
  'keyflow-redrive',
  'keyflow-lag',
  'keyflow-trigger-progress',
] as const;

/**
 * The lag of consumer group `groupId` on every partition of the topics it has committed offsets on or its live
 * members subscribe to (or of `topics`); a partition without a committed offset counts from its earliest record.
 * Partitions whose offset difference to the LSO is at most `exactUpTo` (default 10,000) are read (one read_committed
 * scan for all of them) and their records counted; larger ones report the difference as an upper bound. Every partition with something left is read far enough to find the oldest record's timestamp.
 */
export async function groupLag(
  kafka: Kafka,
  groupId: string,
  opts: { topics?: string[]; exactUpTo?: number; now?: number } = {},
): Promise<PartitionLag[]> {
  const exactUpTo = BigInt(opts.exactUpTo ?? 10_000);
  const admin = kafka.admin();
  await admin.connect();
  const out: PartitionLag[] = [];
  const ranges: ScanRange[] = [];
  const byRange = new Map<string, PartitionLag>();
  try {
    let topics = opts.topics;
    if (!topics) {
      // The topics the group has committed on, and those its live members subscribe to (a topic a consumer has not
      // committed on yet is lag too); asked for by name, every partition is listed (offset -1: none committed).
      const withOffsets = (await admin.fetchOffsets({ groupId })).map((t) => t.topic);
      const [group] = (await admin.describeGroups([groupId])).groups;
      const subscribed = group.members.flatMap((m) => {
        try {
          return AssignerProtocol.MemberMetadata.decode(m.memberMetadata)?.topics ?? [];
        } catch {
          return []; // not a consumer protocol member
        }
      });
      topics = [...new Set([...withOffsets, ...subscribed])];
      if (!topics.length) return [];
    }
    for (const { topic, partitions } of await admin.fetchOffsets({ groupId, topics })) {
      const ends = new Map((await lastStableOffsets(kafka, topic, admin)).map((e) => [e.partition, e]));
      for (const { partition, offset } of partitions) {
        const e = ends.get(partition);
        if (!e) continue;
        const position = resumePosition(offset, e);
        const diff = e.end - position;
        const lag: PartitionLag = {
          topic,
          partition,
          committed: offset === '-1' ? null : offset,
          end: String(e.end),
          lag: diff <= exactUpTo ? 0 : Number(diff),
          exact: diff <= exactUpTo,
          oldestAgeMs: null,
        };
        out.push(lag);
        if (diff === 0n) continue;
        // Small ranges are read whole (and counted); a large one only up to its oldest record.
        ranges.push({ topic, partition, from: position, to: e.end });
        byRange.set(`${topic}\u0000${partition}`, lag);
      }
    }
  } finally {
    await admin.disconnect();
  }
  const now = opts.now ?? Date.now();
  await scanRanges(
    kafka,
    ranges,
    (topic, partition, m) => {
      const lag = byRange.get(`${topic}\u0000${partition}`)!;
      if (lag.oldestAgeMs === null) lag.oldestAgeMs = Math.max(0, now - Number(m.timestamp));
      if (!lag.exact) return false; // a large range: only its oldest record was wanted
      lag.lag++;
    },
    { groupPrefix: 'keyflow-lag' },
  );
  return out.sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition));
}
