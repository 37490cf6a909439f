import { AssignerProtocol, type Consumer } from 'kafkajs';
import { TestNamespace, eventually } from '@keyflow/testing';
import { coPartitionedAssigner, CO_PARTITIONED_PROTOCOL } from '../../src';

jest.setTimeout(120_000);

/** The assigner in a real consumer group on the real broker (kafkajs consumers; DescribeGroups reads it back). */
describe('the co-partitioned assigner in a real consumer group', () => {
  const ns = new TestNamespace('copart');
  const consumers: Consumer[] = [];
  afterAll(async () => {
    await Promise.allSettled(consumers.map((c) => c.disconnect()));
    await ns.cleanup();
  });

  /** A member that reports the partitions of its last assignment as owned, as the engine does. */
  async function member(groupId: string, topics: string[]) {
    let owned: number[] = [];
    let memberId = '';
    const c = ns.kafka.consumer({
      groupId,
      sessionTimeout: 6_000,
      heartbeatInterval: 500,
      maxWaitTimeInMs: 100,
      partitionAssigners: [coPartitionedAssigner({ ownedPartitions: () => owned })],
    });
    c.on(c.events.GROUP_JOIN, (e) => {
      memberId = e.payload.memberId;
      owned = [...new Set(Object.values(e.payload.memberAssignment).flat())];
    });
    consumers.push(c);
    await c.connect();
    for (const topic of topics) await c.subscribe({ topic, fromBeginning: true });
    await c.run({ eachMessage: async () => undefined });
    return { consumer: c, memberId: () => memberId };
  }

  /** member id -> topic -> partitions, once the group is Stable with `size` members. */
  async function stable(groupId: string, size: number) {
    const admin = await ns.getAdmin();
    const g = await eventually(
      `group Stable with ${size} members`,
      async () => (await admin.describeGroups([groupId])).groups[0],
      { until: (x) => x.state === 'Stable' && x.members.length === size, timeoutMs: 60_000, intervalMs: 200 },
    );
    expect(g.protocol).toBe(CO_PARTITIONED_PROTOCOL);
    return Object.fromEntries(
      g.members.map((m) => [
        m.memberId,
        AssignerProtocol.MemberAssignment.decode(m.memberAssignment)!.assignment,
      ]),
    );
  }

  it('4 members over 2 topics of 6 partitions: partition p of both on one member; a leaver moves only its own', async () => {
    const topics = await ns.createTopics(
      { name: 'requests', numPartitions: 6 },
      { name: 'results', numPartitions: 6 },
    );
    const groupId = ns.groupId('copart');
    const members = [];
    for (let i = 0; i < 4; i++) members.push(await member(groupId, topics));
    const four = await stable(groupId, 4);
    for (const a of Object.values(four)) expect(a[topics[0]]).toEqual(a[topics[1]]);
    const all = Object.values(four).flatMap((a) => a[topics[0]]);
    expect(all.sort()).toEqual([0, 1, 2, 3, 4, 5]);
    expect(Object.values(four).map((a) => a[topics[0]].length)).toEqual(expect.arrayContaining([1, 1, 2, 2]));

    // A member on kafkajs's default round-robin assigner (an old version in a rolling upgrade) cannot join: the
    // group has no protocol in common with it, so it fails loudly instead of splitting partitions.
    const old = ns.kafka.consumer({ groupId, retry: { retries: 0, restartOnFailure: async () => false } });
    consumers.push(old);
    const crashed = new Promise<Error>((r) => old.on(old.events.CRASH, (e) => r(e.payload.error)));
    await old.connect();
    for (const topic of topics) await old.subscribe({ topic });
    await old.run({ eachMessage: async () => undefined });
    expect((await crashed).message).toMatch(/protocols are incompatible/);

    // A member with 2 partitions leaves: the others keep all they had (sticky), co-partitioned, 2 each.
    const leaver = members.find((m) => four[m.memberId()][topics[0]].length === 2)!;
    await leaver.consumer.disconnect();
    const three = await stable(groupId, 3);
    for (const m of members.filter((x) => x !== leaver)) {
      const now = three[m.memberId()];
      expect(now[topics[0]]).toEqual(now[topics[1]]);
      expect(now[topics[0]]).toEqual(expect.arrayContaining(four[m.memberId()][topics[0]]));
      expect(now[topics[0]]).toHaveLength(2);
    }
  });
});
