import fc from 'fast-check';
import { AssignerProtocol, type Cluster } from 'kafkajs';
import {
  assignCoPartitioned,
  coPartitionedAssigner,
  decodeOwnedPartitions,
  encodeOwnedPartitions,
  planCoPartitions,
  CO_PARTITIONED_PROTOCOL,
  PartitionCountMismatchError,
  type CoPartitionedAssignment,
} from '../../src';

const TOPIC_NAMES = ['wf.requests', 'task.results', 'wf.state', 'wf.events'];

/**
 * A group before and after a rebalance: `before` members (0 to 8) and their previous partitions (each partition
 * owned by one of them or by nobody), `after` members (1 to 8; some stay, some are new), 1 to 64 partitions over
 * 2 to 4 topics.
 */
const scenario = fc
  .record({
    n: fc.integer({ min: 1, max: 64 }),
    topicCount: fc.integer({ min: 2, max: 4 }),
    before: fc.uniqueArray(fc.integer({ min: 0, max: 11 }), { maxLength: 8 }),
    after: fc.uniqueArray(fc.integer({ min: 0, max: 11 }), { minLength: 1, maxLength: 8 }),
    owners: fc.array(fc.integer({ min: -1, max: 7 }), { minLength: 64, maxLength: 64 }),
  })
  .map(({ n, topicCount, before, after, owners }) => {
    const previous = new Map<string, number[]>(before.map((i) => [`m${i}`, []]));
    for (let p = 0; p < n; p++) {
      const o = owners[p];
      if (o >= 0 && o < before.length) previous.get(`m${before[o]}`)!.push(p);
    }
    const topics = Object.fromEntries(TOPIC_NAMES.slice(0, topicCount).map((t) => [t, n]));
    const members = after.map((i) => ({ memberId: `m${i}`, owned: previous.get(`m${i}`) ?? [] }));
    return { n, topics, previous, members };
  });

const firstTopic = (a: CoPartitionedAssignment, id: string) => Object.values(a[id])[0];

describe('the co-partitioned assigner', () => {
  it('assigns every partition of every topic to exactly one member', () => {
    fc.assert(
      fc.property(scenario, ({ n, topics, members }) => {
        const a = assignCoPartitioned(members, topics);
        for (const topic of Object.keys(topics)) {
          const all = Object.values(a).flatMap((m) => m[topic]);
          expect(all.sort((x, y) => x - y)).toEqual(Array.from({ length: n }, (_, p) => p));
        }
        expect(Object.keys(a).sort()).toEqual(members.map((m) => m.memberId).sort());
      }),
    );
  });

  it('partition p of every input topic lands on one member', () => {
    fc.assert(
      fc.property(scenario, ({ topics, members }) => {
        const a = assignCoPartitioned(members, topics);
        for (const [, perTopic] of Object.entries(a)) {
          const lists = Object.keys(topics).map((t) => JSON.stringify(perTopic[t]));
          expect(new Set(lists).size).toBe(1);
        }
      }),
    );
  });

  it('is balanced: the partition counts of two members differ by at most one', () => {
    fc.assert(
      fc.property(scenario, ({ topics, members }) => {
        const a = assignCoPartitioned(members, topics);
        const sizes = Object.keys(a).map((id) => firstTopic(a, id).length);
        expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
      }),
    );
  });

  it('is sticky: it keeps in place as many previous partitions as any balanced assignment can', () => {
    fc.assert(
      fc.property(scenario, ({ n, topics, members }) => {
        const a = assignCoPartitioned(members, topics);
        const m = members.length;
        const base = Math.floor(n / m);
        const kept = members.map((x) => firstTopic(a, x.memberId).filter((p) => x.owned.includes(p)).length);
        // Each member that stays keeps what it had, up to the share every member is sure to get.
        members.forEach((x, i) => expect(kept[i]).toBeGreaterThanOrEqual(Math.min(x.owned.length, base)));
        // And in total, the best any balanced assignment can do: the n % m larger shares matched to the largest
        // previous holdings (previous holdings here are disjoint).
        const best = members
          .map((x) => x.owned.length)
          .sort((x, y) => y - x)
          .reduce((s, owned, i) => s + Math.min(owned, base + (i < n % m ? 1 : 0)), 0);
        expect(kept.reduce((s, k) => s + k, 0)).toBe(best);
      }),
    );
  });

  it('a member joining takes partitions only from members above their new share; no other partition moves', () => {
    fc.assert(
      fc.property(scenario, fc.integer({ min: 12, max: 20 }), ({ n, topics, members }, joiner) => {
        fc.pre(members.length < 8);
        const settled = assignCoPartitioned(members, topics);
        const owned = (id: string) => firstTopic(settled, id);
        const next = assignCoPartitioned(
          [
            ...members.map((x) => ({ memberId: x.memberId, owned: owned(x.memberId) })),
            { memberId: `j${joiner}` },
          ],
          topics,
        );
        const share = Math.ceil(n / (members.length + 1));
        for (const x of members) {
          const now = firstTopic(next, x.memberId);
          expect(now.every((p) => owned(x.memberId).includes(p))).toBe(true); // nothing moves between old members
          if (now.length < owned(x.memberId).length)
            expect(owned(x.memberId).length).toBeGreaterThan(share - 1);
        }
        const moved = members.reduce(
          (s, x) => s + owned(x.memberId).length - firstTopic(next, x.memberId).length,
          0,
        );
        expect(moved).toBe(firstTopic(next, `j${joiner}`).length);
      }),
    );
  });

  it('a member leaving: every other member keeps all it had', () => {
    fc.assert(
      fc.property(scenario, fc.nat(), ({ topics, members }, pick) => {
        fc.pre(members.length > 1);
        const settled = assignCoPartitioned(members, topics);
        const gone = members[pick % members.length].memberId;
        const rest = members.filter((x) => x.memberId !== gone);
        const next = assignCoPartitioned(
          rest.map((x) => ({ memberId: x.memberId, owned: firstTopic(settled, x.memberId) })),
          topics,
        );
        for (const x of rest)
          expect(firstTopic(settled, x.memberId).every((p) => firstTopic(next, x.memberId).includes(p))).toBe(
            true,
          );
      }),
    );
  });

  it('gives the same assignment whatever the order of the members', () => {
    fc.assert(
      fc.property(scenario, ({ topics, members }) => {
        expect(assignCoPartitioned([...members].reverse(), topics)).toEqual(
          assignCoPartitioned(members, topics),
        );
      }),
    );
  });

  it('a partition claimed by two members (an expelled member rejoining) is assigned once, to the first by id', () => {
    const plan = planCoPartitions(
      ['b', 'a'],
      2,
      new Map([
        ['a', [0, 1]],
        ['b', [1]],
      ]),
    );
    expect(plan).toEqual(
      new Map([
        ['a', [0]],
        ['b', [1]],
      ]),
    );
  });

  it('refuses topics with different partition counts with a typed, non-retryable error', () => {
    let err: unknown;
    try {
      assignCoPartitioned([{ memberId: 'a' }], { 'wf.requests': 6, 'task.results': 4 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PartitionCountMismatchError);
    expect(err).toMatchObject({ code: 'PARTITION_COUNT_MISMATCH', retryable: false });
    expect((err as Error).message).toContain('wf.requests=6, task.results=4');
  });

  it('owned partitions round-trip through userData; foreign or empty userData reads as none', () => {
    expect(decodeOwnedPartitions(encodeOwnedPartitions(new Set([5, 1, 3])))).toEqual([1, 3, 5]);
    expect(decodeOwnedPartitions(Buffer.alloc(0))).toEqual([]);
    expect(decodeOwnedPartitions(Buffer.from([0, 1, 2]))).toEqual([]);
    expect(decodeOwnedPartitions(Buffer.from('{"owned":"x"}'))).toEqual([]);
  });

  it('the kafkajs adapter announces its protocol with the owned partitions and assigns co-partitioned, sticky', async () => {
    const partitions = Array.from({ length: 6 }, (_, partitionId) => ({ partitionId }));
    const cluster = { findTopicPartitionMetadata: () => partitions } as unknown as Cluster;
    const topics = ['wf.requests', 'task.results'];
    const owned: Record<string, number[]> = { a: [0, 1, 2], b: [3, 4, 5], c: [] };
    const assigners = Object.fromEntries(
      Object.keys(owned).map((id) => [
        id,
        coPartitionedAssigner({ ownedPartitions: () => owned[id] })({
          cluster,
          groupId: 'g',
          logger: undefined as never,
        }),
      ]),
    );
    const members = Object.entries(assigners).map(([memberId, a]) => {
      const state = a.protocol({ topics });
      expect(state.name).toBe(CO_PARTITIONED_PROTOCOL);
      return { memberId, memberMetadata: state.metadata };
    });
    const result = await assigners.a.assign({ members, topics });
    const decoded = Object.fromEntries(
      result.map((r) => [
        r.memberId,
        AssignerProtocol.MemberAssignment.decode(r.memberAssignment)!.assignment,
      ]),
    );
    expect(decoded).toEqual({
      a: { 'wf.requests': [0, 1], 'task.results': [0, 1] },
      b: { 'wf.requests': [3, 4], 'task.results': [3, 4] },
      c: { 'wf.requests': [2, 5], 'task.results': [2, 5] },
    });
  });
});
