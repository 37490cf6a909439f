import { TestNamespace } from '@keyflow/testing';
import { BatchingProducer, createIdempotentProducer } from '../../src';

jest.setTimeout(60_000);

/** The broker's default message.max.bytes (the local stack and most clusters keep it). */
const MESSAGE_MAX_BYTES = 1_048_588;

describe('the batching producer against a real broker', () => {
  const ns = new TestNamespace('batching-producer');
  afterAll(() => ns.cleanup());

  it('messages that each fit but together exceed message.max.bytes on one partition are all written, each once', async () => {
    const [topic] = await ns.createTopics({ name: 'near-limit', numPartitions: 1 });
    const producer = createIdempotentProducer(ns.kafka);
    await producer.connect();
    try {
      const b = new BatchingProducer(producer);
      // Each under half of message.max.bytes (the claim check's inline limit); sent in one turn: one flush.
      const value = 'x'.repeat(Math.floor(MESSAGE_MAX_BYTES / 2) - 10_000);
      await Promise.all(Array.from({ length: 6 }, (_, i) => b.send(topic, { key: `k${i}`, value })));
      const offsets = await (await ns.getAdmin()).fetchTopicOffsets(topic);
      expect(offsets[0].high).toBe('6');
    } finally {
      await producer.disconnect();
    }
  });
});
