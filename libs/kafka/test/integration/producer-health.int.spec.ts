import { TestNamespace } from '@keyflow/testing';
import { createIdempotentProducer, watchProducer } from '../../src';

jest.setTimeout(60_000);

describe('a watched producer', () => {
  const ns = new TestNamespace('producer-health');
  afterAll(() => ns.cleanup());

  it('reports a producer that can no longer send (disconnected under its users) as failed for good', async () => {
    const [topic] = await ns.createTopics({ name: 'out', numPartitions: 1 });
    const raw = createIdempotentProducer(ns.kafka);
    const failures: Error[] = [];
    const p = watchProducer(raw, (e) => failures.push(e));
    await p.connect();
    await p.send({ topic, acks: -1, messages: [{ key: 'k', value: 'ok' }] });
    expect(failures).toEqual([]);
    await raw.disconnect(); // not through the watched producer: as if the client died by itself
    await expect(p.send({ topic, acks: -1, messages: [{ key: 'k', value: 'lost' }] })).rejects.toThrow();
    expect(failures).toHaveLength(1);
  });

  it('refuses a send to a partition the topic does not have, instead of resolving without it', async () => {
    const [topic] = await ns.createTopics({ name: 'one-partition', numPartitions: 1 });
    const p = createIdempotentProducer(ns.kafka);
    await p.connect();
    try {
      await expect(
        p.send({
          topic,
          acks: -1,
          messages: [
            { partition: 0, value: 'ok' },
            { partition: 5, value: 'nowhere' },
          ],
        }),
      ).rejects.toThrow(/partition\(s\) 5/);
      // nothing of that send was written: the refusal comes before any request
      const offsets = await (await ns.getAdmin()).fetchTopicOffsets(topic);
      expect(offsets[0].high).toBe('0');
      // the producer stays usable
      await expect(
        p.send({ topic, acks: -1, messages: [{ partition: 0, value: 'ok' }] }),
      ).resolves.toHaveLength(1);
    } finally {
      await p.disconnect();
    }
  });

  it('does not report a record the broker refuses (too large): the producer stays usable', async () => {
    const [topic] = await ns.createTopics({
      name: 'small',
      numPartitions: 1,
      configEntries: [{ name: 'max.message.bytes', value: '1024' }],
    });
    const failures: Error[] = [];
    const p = watchProducer(createIdempotentProducer(ns.kafka), (e) => failures.push(e));
    await p.connect();
    const err = await p
      .send({ topic, acks: -1, messages: [{ key: 'k', value: Buffer.alloc(4096, 1) }] })
      .catch((e) => e);
    expect(err).toMatchObject({ type: 'MESSAGE_TOO_LARGE' });
    await p.send({ topic, acks: -1, messages: [{ key: 'k', value: 'small' }] });
    expect(failures).toEqual([]);
    await p.disconnect();
    // a send after our own disconnect is our shutdown, not a failure
    await expect(p.send({ topic, messages: [{ value: 'x' }] })).rejects.toThrow();
    expect(failures).toEqual([]);
  });

  it('a request refused for one partition (too large) loses nothing the broker wrote for another, nor what follows there', async () => {
    // Four partitions: on a cluster of up to three brokers two of them share a leader, so one request carries both.
    const [topic] = await ns.createTopics({
      name: 'mixed',
      numPartitions: 4,
      configEntries: [{ name: 'max.message.bytes', value: '1024' }],
    });
    const admin = await ns.getAdmin();
    const [md] = (await admin.fetchTopicMetadata({ topics: [topic] })).topics;
    const byLeader = new Map<number, number[]>();
    for (const p of md.partitions) byLeader.set(p.leader, [...(byLeader.get(p.leader) ?? []), p.partitionId]);
    const [refused, written] = [...byLeader.values()].find((ps) => ps.length >= 2)!;
    const p = createIdempotentProducer(ns.kafka);
    await p.connect();
    try {
      // One request to one broker: `refused` refused as too large, `written` written.
      const err = await p
        .send({
          topic,
          acks: -1,
          messages: [
            { partition: refused, value: Buffer.alloc(4096, 1) },
            { partition: written, value: 'first' },
          ],
        })
        .catch((e) => e);
      expect(err).toMatchObject({ type: 'MESSAGE_TOO_LARGE' });
      // The next record for `written` must be written too (not taken by the broker for a duplicate of the first).
      await p.send({ topic, acks: -1, messages: [{ partition: written, value: 'second' }] });
      const offsets = await admin.fetchTopicOffsets(topic);
      const high = Object.fromEntries(offsets.map((o) => [o.partition, o.high]));
      expect({ refused: high[refused], written: high[written] }).toEqual({ refused: '0', written: '2' });
    } finally {
      await p.disconnect();
    }
  });
});
