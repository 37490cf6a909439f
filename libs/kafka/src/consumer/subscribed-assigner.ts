import { AssignerProtocol, type PartitionAssigner } from 'kafkajs';

/** One group member as the assigner sees it: its id and the topics it subscribed to. */
export interface SubscribedMember {
  memberId: string;
  topics: string[];
}

/**
 * Round-robin assignment that honours each member's own subscription: partitions of a topic go only to the
 * members that subscribed to it, in turn, the turn carried across topics so that the members' totals stay even.
 * This is what Kafka's Java RoundRobinAssignor does for members with different subscriptions (KIP-54's discussion
 * of the round-robin assignor; `org.apache.kafka.clients.consumer.RoundRobinAssignor`). kafkajs's own round-robin
 * assigner deals every topic of the group to every member, so a worker for task type A in a group with a worker for
 * type B is handed B's partitions, which it never consumes: they stall.
 *
 * Pure and deterministic: members and topics are sorted, so every member computes the same answer.
 * @param members group members with their subscriptions (order does not matter)
 * @param partitions partition count per topic
 * @returns per member id, the partitions it owns per topic (members with nothing get an empty object)
 */
export function assignSubscribed(
  members: SubscribedMember[],
  partitions: Record<string, number>,
): Map<string, Record<string, number[]>> {
  const sorted = [...members].sort((a, b) => a.memberId.localeCompare(b.memberId));
  const out = new Map(sorted.map((m) => [m.memberId, {} as Record<string, number[]>]));
  const load = new Map(sorted.map((m) => [m.memberId, 0]));
  for (const topic of Object.keys(partitions).sort()) {
    const takers = sorted.filter((m) => m.topics.includes(topic));
    if (takers.length === 0) continue;
    for (let p = 0; p < partitions[topic]; p++) {
      // The least-loaded subscriber takes the partition (ties: the first in member order), which is round robin
      // among equals and keeps totals even across topics with different subscriber sets.
      const m = takers.reduce((best, c) => (load.get(c.memberId)! < load.get(best.memberId)! ? c : best));
      (out.get(m.memberId)![topic] ??= []).push(p);
      load.set(m.memberId, load.get(m.memberId)! + 1);
    }
  }
  return out;
}

/** The kafkajs assigner's protocol name: a member with another assigner cannot join the group by mistake. */
export const SUBSCRIBED_ASSIGNER = 'KeyflowSubscribedRoundRobin';

/** Partition counts a member knows for its own topics (0 for a topic its metadata does not hold). */
function countsOf(cluster: { findTopicPartitionMetadata(topic: string): unknown[] }, topics: string[]) {
  const counts: Record<string, number> = {};
  for (const t of topics) {
    try {
      counts[t] = cluster.findTopicPartitionMetadata(t).length;
    } catch {
      counts[t] = 0;
    }
  }
  return counts;
}

/**
 * kafkajs PartitionAssigner over {@link assignSubscribed}. Each member announces its subscription and the partition
 * counts its own metadata holds for those topics (`AssignerProtocol.MemberMetadata`, counts as JSON userData):
 * kafkajs hands the leader only its own subscription, and the leader must not add other members' topics to its
 * metadata (a topic deleted later would then fail every metadata refresh of the leader).
 */
export const subscribedRoundRobinAssigner: PartitionAssigner = ({ cluster }) => ({
  name: SUBSCRIBED_ASSIGNER,
  version: 0,
  async assign({ members }) {
    const partitions: Record<string, number> = {};
    const subscribed = members.map((m) => {
      const meta = AssignerProtocol.MemberMetadata.decode(m.memberMetadata);
      let counts: Record<string, number> = {};
      try {
        counts = JSON.parse(meta?.userData?.toString('utf8') || '{}') as Record<string, number>;
      } catch {
        /* a member of another version: its topics count as unknown (0) unless another member knows them */
      }
      for (const [t, n] of Object.entries(counts))
        if (Number.isInteger(n)) partitions[t] = Math.max(partitions[t] ?? 0, n);
      return { memberId: m.memberId, topics: meta?.topics ?? [] };
    });
    return [...assignSubscribed(subscribed, partitions)].map(([memberId, assignment]) => ({
      memberId,
      memberAssignment: AssignerProtocol.MemberAssignment.encode({
        version: 0,
        assignment,
        userData: Buffer.alloc(0),
      }),
    }));
  },
  protocol({ topics }) {
    return {
      name: SUBSCRIBED_ASSIGNER,
      metadata: AssignerProtocol.MemberMetadata.encode({
        version: 0,
        topics,
        userData: Buffer.from(JSON.stringify(countsOf(cluster, topics))),
      }),
    };
  },
});
