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
    const [topic] = await ns.createTopics({
      name: 'mixed',
      numPartitions: 2,
      configEntries: [{ name: 'max.message.bytes', value: '1024' }],
    });
    const p = createIdempotentProducer(ns.kafka);
    await p.connect();
    try {
      // One request to one broker: partition 0 refused as too large, partition 1 written.
      const err = await p
        .send({
          topic,
          acks: -1,
          messages: [
            { partition: 0, value: Buffer.alloc(4096, 1) },
            { partition: 1, value: 'first' },
          ],
        })
        .catch((e) => e);
      expect(err).toMatchObject({ type: 'MESSAGE_TOO_LARGE' });
      // The next record for partition 1 must be written too (not taken by the broker for a duplicate of the first).
      await p.send({ topic, acks: -1, messages: [{ partition: 1, value: 'second' }] });
      const offsets = await (await ns.getAdmin()).fetchTopicOffsets(topic);
      const high = Object.fromEntries(offsets.map((o) => [o.partition, o.high]));
      expect(high).toEqual({ 0: '0', 1: '2' });
    } finally {
      await p.disconnect();
    }
  });
});
