import { TestNamespace, eventually } from '@keyflow/testing';
import { createIdempotentProducer } from '../../src';

jest.setTimeout(90_000);

/**
 * Several transactional producers write one partition (the orchestrator's per-partition producers all write the
 * task topics), and their transactions interleave. The broker lists a fetch's aborted transactions in the order
 * they ended, not the order they began; a read_committed consumer must skip every record of each of them (KIP-98;
 * the Java client keeps them in a queue ordered by first offset).
 */
describe('a read_committed consumer', () => {
  const ns = new TestNamespace('aborted-txns');
  afterAll(() => ns.cleanup());

  /** The values a read_committed consumer reads from `topic`, once it has read the record `committed`. */
  async function readCommitted(topic: string, reader: string): Promise<string[]> {
    const consumer = ns.kafka.consumer({ groupId: ns.groupId(reader), readUncommitted: false });
    const seen: string[] = [];
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message }) => void seen.push(message.value!.toString()) });
    try {
      await eventually('the committed record is read', () => seen.includes('committed'));
    } finally {
      await consumer.disconnect();
    }
    return seen;
  }

  it('never sees a record of an aborted transaction, when transactions of two producers interleave', async () => {
    const [topic] = await ns.createTopics({ name: 'interleaved', numPartitions: 1 });
    const a = createIdempotentProducer(ns.kafka, ns.groupId('tx-a'));
    const b = createIdempotentProducer(ns.kafka, ns.groupId('tx-b'));
    await Promise.all([a.connect(), b.connect()]);
    try {
      // A begins first and ends last: its transaction spans B's, which the broker lists first.
      const ta = await a.transaction();
      await ta.send({ topic, acks: -1, messages: [{ key: 'k', value: 'aborted-a-1' }] });
      const tb = await b.transaction();
      await tb.send({ topic, acks: -1, messages: [{ key: 'k', value: 'aborted-b' }] });
      await ta.send({ topic, acks: -1, messages: [{ key: 'k', value: 'aborted-a-2' }] });
      await tb.abort();
      await ta.abort();
      const tc = await b.transaction();
      await tc.send({ topic, acks: -1, messages: [{ key: 'k', value: 'committed' }] });
      await tc.commit();
    } finally {
      await Promise.allSettled([a.disconnect(), b.disconnect()]);
    }

    expect(await readCommitted(topic, 'reader')).toEqual(['committed']);
  });

  it("never takes a data record whose key looks like an abort marker's for the end of an aborted transaction", async () => {
    const [topic] = await ns.createTopics({ name: 'marker-key', numPartitions: 1 });
    const p = createIdempotentProducer(ns.kafka, ns.groupId('tx-marker-key'));
    await p.connect();
    try {
      const t = await p.transaction();
      // A control record's key is version (int16) + type (int16, 0 = abort): four zero bytes, as this data key.
      await t.send({ topic, acks: -1, messages: [{ key: Buffer.alloc(4), value: 'aborted-zero-key' }] });
      await t.send({ topic, acks: -1, messages: [{ key: 'k', value: 'aborted-after' }] });
      await t.abort();
      const c = await p.transaction();
      await c.send({ topic, acks: -1, messages: [{ key: 'k', value: 'committed' }] });
      await c.commit();
    } finally {
      await p.disconnect();
    }
    expect(await readCommitted(topic, 'marker-reader')).toEqual(['committed']);
  });
});
