import { AssignerProtocol, type PartitionAssigner } from 'kafkajs';
import { PartitionCountMismatchError } from '../admin/topics';

/**
 * Co-partitioning, sticky partition assignment for a consumer group that reads several topics keyed alike.
 *
 * The rule (Kafka Streams' co-partitioning requirement, see "Kafka Streams Developer Guide: Joining - co-partitioning"):
 * topics with the same key and the same partition count hold a key's records in the same partition number, so
 * partition p of EVERY input topic must go to the same member, or the events of one key are handled by two members.
 * kafkajs's default round-robin assigner walks (topic, partition) pairs across members and splits partition p of
 * two topics whenever the member count does not divide the partition count.
 *
 * Stickiness (KIP-54's StickyAssignor, and KIP-429's goal of moving as few partitions as possible on a rebalance):
 * every move costs the new owner a fence and a restore, so a member keeps the partitions it owned as long as the
 * balance allows.
 */

/** The protocol name members announce. Distinct from kafkajs's `RoundRobinAssigner`: a group mixing members of
 * the old and new versions has no common protocol, so the broker refuses the join (INCONSISTENT_GROUP_PROTOCOL)
 * instead of splitting partitions. */
export const CO_PARTITIONED_PROTOCOL = 'KeyflowCoPartitioned';
const PROTOCOL_VERSION = 1;

/** A group member as the assignment sees it. */
export interface CoPartitionMember {
  memberId: string;
  /** Partition numbers this member owned before the rebalance (from its subscription's userData). May be empty. */
  owned?: readonly number[];
}

/** member id -> topic -> partition numbers (ascending); every topic holds the same numbers for one member. */
export type CoPartitionedAssignment = Record<string, Record<string, number[]>>;

/**
 * Assigns partitions so that each member gets the SAME partition numbers on every topic.
 *
 * - Complete and exclusive: each partition of each topic goes to exactly one member.
 * - Balanced: the partition counts of two members differ by at most one (members beyond the partition count get
 *   none).
 * - Sticky: with `base = floor(n / members)` and `n % members` members allowed one more, the members that owned the
 *   most keep the larger shares; each member keeps the lowest of its previous partitions up to its share; only the
 *   rest moves, to members below their share, in member-id order. This keeps the largest number of partitions in
 *   place any balanced assignment can keep, so a member that joins takes only from members above their new share,
 *   and when a member leaves the others keep all they had.
 * - Deterministic: the result depends only on the member ids (sorted), their previous partitions and the counts.
 *   A partition claimed by several members (a member that was expelled and still believes it owns it) stays with
 *   the first claimant in member-id order; partitions outside 0..n-1 are ignored.
 *
 * @param members the group's members, in any order.
 * @param partitionsPerTopic partition count of every topic to assign, e.g. `{ 'wf.requests': 6, 'task.results': 6 }`.
 * @returns every member's partitions per topic (a member with none gets an empty list per topic).
 * @throws PartitionCountMismatchError (code PARTITION_COUNT_MISMATCH, not retryable) when the counts differ.
 */
export function assignCoPartitioned(
  members: readonly CoPartitionMember[],
  partitionsPerTopic: Readonly<Record<string, number>>,
): CoPartitionedAssignment {
  const topics = Object.keys(partitionsPerTopic).sort();
  const counts = new Set(topics.map((t) => partitionsPerTopic[t]));
  if (counts.size > 1) throw new PartitionCountMismatchError({ ...partitionsPerTopic });
  const n = topics.length ? partitionsPerTopic[topics[0]] : 0;
  const ownedBy = new Map<string, readonly number[]>();
  for (const m of members) ownedBy.set(m.memberId, [...(ownedBy.get(m.memberId) ?? []), ...(m.owned ?? [])]);
  const plan = planCoPartitions([...ownedBy.keys()], n, ownedBy);
  const out: CoPartitionedAssignment = {};
  for (const [id, partitions] of plan) out[id] = Object.fromEntries(topics.map((t) => [t, [...partitions]]));
  return out;
}

/**
 * The partition numbers of each member (see {@link assignCoPartitioned} for the guarantees).
 * @param memberIds member ids, in any order (sorted here; duplicates ignored).
 * @param n partitions per topic (>= 0).
 * @param ownedBy previous partitions per member id.
 * @returns member id -> ascending partition numbers, for every member (in member-id order).
 */
export function planCoPartitions(
  memberIds: readonly string[],
  n: number,
  ownedBy: ReadonlyMap<string, readonly number[]>,
): Map<string, number[]> {
  const ids = [...new Set(memberIds)].sort();
  const plan = new Map<string, number[]>(ids.map((id) => [id, []]));
  if (ids.length === 0) return plan;

  // Previous claims that are still valid; the first claimant (member-id order) of a partition keeps the claim.
  const claimed = new Set<number>();
  const previous = new Map<string, number[]>();
  for (const id of ids) {
    const mine = [...new Set(ownedBy.get(id) ?? [])]
      .filter((p) => Number.isInteger(p) && p >= 0 && p < n && !claimed.has(p))
      .sort((a, b) => a - b);
    mine.forEach((p) => claimed.add(p));
    previous.set(id, mine);
  }

  // Shares: base each, one more for the `extra` members that owned the most (ties: member-id order).
  const base = Math.floor(n / ids.length);
  const extra = n % ids.length;
  const byOwned = [...ids].sort(
    (a, b) => previous.get(b)!.length - previous.get(a)!.length || (a < b ? -1 : 1),
  );
  const share = new Map(byOwned.map((id, i) => [id, base + (i < extra ? 1 : 0)]));

  const taken = new Set<number>();
  for (const id of ids) {
    const kept = previous.get(id)!.slice(0, share.get(id));
    kept.forEach((p) => taken.add(p));
    plan.set(id, kept);
  }
  const free = Array.from({ length: n }, (_, p) => p).filter((p) => !taken.has(p));
  for (const id of ids) {
    const mine = plan.get(id)!;
    while (mine.length < share.get(id)!) mine.push(free.shift()!);
    mine.sort((a, b) => a - b);
  }
  return plan;
}

/** userData of a member's subscription: the partitions it owns now (`{"v":1,"owned":[0,3]}`). */
export function encodeOwnedPartitions(owned: Iterable<number>): Buffer {
  return Buffer.from(JSON.stringify({ v: PROTOCOL_VERSION, owned: [...owned].sort((a, b) => a - b) }));
}

/** The partitions in a subscription's userData; none when it is empty or not ours (never throws). */
export function decodeOwnedPartitions(userData: Buffer | null | undefined): number[] {
  if (!userData?.length) return [];
  try {
    const parsed = JSON.parse(userData.toString('utf8')) as { owned?: unknown };
    return Array.isArray(parsed.owned) ? parsed.owned.filter((p): p is number => Number.isInteger(p)) : [];
  } catch {
    return [];
  }
}

/**
 * The kafkajs adapter of {@link assignCoPartitioned}: `kafka.consumer({ partitionAssigners: [coPartitionedAssigner(
 * { ownedPartitions })] })`. Each member's subscription carries the partitions it owns (from `ownedPartitions`, read
 * at each join) in its userData; the group leader assigns with the partition counts of the subscribed topics from
 * the cluster metadata (refreshed by kafkajs just before).
 * @param opts.ownedPartitions the partitions this member owns now (the numbers of its last assignment).
 * @returns a kafkajs PartitionAssigner named {@link CO_PARTITIONED_PROTOCOL}.
 * @throws (from assign, on the leader) PartitionCountMismatchError when the subscribed topics' partition counts
 *   differ: the leader's consumer fails rather than splitting partitions.
 */
export function coPartitionedAssigner(opts: { ownedPartitions: () => Iterable<number> }): PartitionAssigner {
  return ({ cluster }) => ({
    name: CO_PARTITIONED_PROTOCOL,
    version: PROTOCOL_VERSION,
    protocol({ topics }) {
      return {
        name: CO_PARTITIONED_PROTOCOL,
        metadata: AssignerProtocol.MemberMetadata.encode({
          version: PROTOCOL_VERSION,
          topics,
          userData: encodeOwnedPartitions(opts.ownedPartitions()),
        }),
      };
    },
    async assign({ members, topics }) {
      const counts = Object.fromEntries(topics.map((t) => [t, cluster.findTopicPartitionMetadata(t).length]));
      const plan = assignCoPartitioned(
        members.map((m) => ({
          memberId: m.memberId,
          owned: decodeOwnedPartitions(AssignerProtocol.MemberMetadata.decode(m.memberMetadata)?.userData),
        })),
        counts,
      );
      return members.map((m) => ({
        memberId: m.memberId,
        memberAssignment: AssignerProtocol.MemberAssignment.encode({
          version: PROTOCOL_VERSION,
          assignment: plan[m.memberId] ?? {},
          userData: Buffer.alloc(0),
        }),
      }));
    },
  });
}
