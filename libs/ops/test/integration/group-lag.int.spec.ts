import type { Producer } from '@keyflow/kafka';
import { TestNamespace } from '@keyflow/testing';
import { groupLag } from '../../src';

jest.setTimeout(90_000);

/**
 * Lag as a read_committed consumer sees it (issue "Operate it"): Kafka's own tools count the commit marker that ends
 * every transaction and the records of aborted ones, so a caught-up group on a transactional topic shows a lag of 1.
 */
describe('consumer group lag on a transactional topic', () => {
  const ns = new TestNamespace('group-lag');
  const producers: Producer[] = [];
  afterAll(async () => {
    await Promise.allSettled(producers.map((p) => p.disconnect()));
    await ns.cleanup();
  });

  it('counts only the records a read_committed consumer would still get: no markers, no aborted or open records', async () => {
    const [topic] = await ns.createTopics({ name: 'tx', numPartitions: 1 });
    const producer = (id: string) => {
      const p = ns.kafka.producer({
        transactionalId: `${ns.prefix}-${id}`,
        idempotent: true,
        maxInFlightRequests: 1,
      });
      producers.push(p);
      return p;
    };
    const p = producer('a');
    await p.connect();
    const inTx = async (values: string[], end: 'commit' | 'abort') => {
      const tx = await p.transaction();
      await tx.send({ topic, messages: values.map((v) => ({ key: v, value: v })) });
      await tx[end]();
    };
    await inTx(['c1', 'c2'], 'commit');
    await inTx(['x1', 'x2', 'x3'], 'abort');
    await inTx(['c3'], 'commit');

    // A group that read everything and committed the offset after its last record, as a consumer does.
    const groupId = ns.groupId('reader');
    const consumer = ns.kafka.consumer({ groupId, readUncommitted: false, maxWaitTimeInMs: 100 });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const seen: string[] = [];
    await new Promise<void>((resolve) =>
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          seen.push(message.value!.toString());
          await consumer.commitOffsets([{ topic, partition, offset: String(BigInt(message.offset) + 1n) }]);
          if (seen.length === 3) resolve();
        },
      }),
    );
    await consumer.disconnect();
    expect(seen).toEqual(['c1', 'c2', 'c3']);

    const caughtUp = await groupLag(ns.kafka, groupId);
    // The log's end is past the committed offset (c3's commit marker), yet nothing is left to read.
    expect(BigInt(caughtUp[0].end)).toBeGreaterThan(BigInt(caughtUp[0].committed!));
    expect(caughtUp).toEqual([
      expect.objectContaining({ topic, partition: 0, lag: 0, exact: true, oldestAgeMs: null }),
    ]);

    // Behind by two committed records, past an aborted transaction, with a transaction still open after them.
    await inTx(['y1', 'y2'], 'abort');
    await inTx(['c4', 'c5'], 'commit');
    const open = producer('b');
    await open.connect();
    const pending = await open.transaction();
    await pending.send({ topic, messages: [{ key: 'o1', value: 'o1' }] });
    const behind = await groupLag(ns.kafka, groupId);
    expect(behind).toEqual([expect.objectContaining({ lag: 2, exact: true })]);
    expect(behind[0].oldestAgeMs).toEqual(expect.any(Number));
    await pending.abort();

    // A group with no committed offset on a named topic counts from the earliest record: c1..c5.
    expect(await groupLag(ns.kafka, ns.groupId('new'), { topics: [topic] })).toEqual([
      expect.objectContaining({ committed: null, lag: 5, exact: true }),
    ]);
    // Past `exactUpTo` the offset difference is reported as an upper bound.
    const rough = await groupLag(ns.kafka, ns.groupId('new'), { topics: [topic], exactUpTo: 2 });
    expect(rough[0]).toMatchObject({ exact: false });
    expect(rough[0].lag).toBeGreaterThan(5);
  });
});
