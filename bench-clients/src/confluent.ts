import { KafkaJS } from '@confluentinc/kafka-javascript';
import type { ChainOptions, ClientUnderTest, RelayOptions, RelayResult, RunningChain } from './types';

type Consumer = KafkaJS.Consumer;
type Producer = KafkaJS.Producer;
type EachBatchPayload = KafkaJS.EachBatchPayload;

/**
 * @confluentinc/kafka-javascript (librdkafka underneath) through its KafkaJS-compatible API, as its MIGRATION.md
 * tells a kafkajs user to move: `acks`, `fromBeginning`, `autoCommit` in the top-level config, `sendOffsets` with the
 * consumer object (librdkafka's send_offsets_to_transaction sends the group's generation and member id), eachBatch
 * batches of at most `js.consumer.max.batch.size` records (default 32; here -1, unlimited: what the client has
 * fetched for the partition, as a kafkajs batch is one partition's fetch).
 */
export function confluentClient(version: string): ClientUnderTest {
  const kafkaOf = (brokers: string[]) =>
    new KafkaJS.Kafka({
      kafkaJS: { brokers, clientId: 'bench-clients-confluent', logLevel: KafkaJS.logLevel.NOTHING },
    });

  const consumerOf = async (kafka: KafkaJS.Kafka, groupId: string, topic: string): Promise<Consumer> => {
    const c = kafka.consumer({
      kafkaJS: {
        groupId,
        fromBeginning: true,
        autoCommit: false,
        readUncommitted: false,
        maxWaitTimeInMs: 100,
        sessionTimeout: 10_000,
        heartbeatInterval: 1_000,
      },
      'js.consumer.max.batch.size': -1,
    });
    await c.connect();
    await c.subscribe({ topic });
    return c;
  };

  const producerOf = (kafka: KafkaJS.Kafka, transactionalId?: string): Producer =>
    kafka.producer({
      kafkaJS: { acks: -1, idempotent: true, ...(transactionalId ? { transactionalId } : {}) },
      // murmur2 as the Java client and keyflow's kafkajs partitioner (librdkafka's default is consistent_random).
      partitioner: 'murmur2_random',
    });

  const txBatch = async (
    p: Producer,
    c: Consumer,
    to: string,
    payload: EachBatchPayload,
  ): Promise<number> => {
    const { batch, resolveOffset } = payload;
    if (!batch.messages.length) return 0;
    const tx = await p.transaction();
    try {
      await tx.send({ topic: to, messages: batch.messages.map((m) => ({ key: m.key, value: m.value })) });
      const next = (BigInt(batch.lastOffset()) + 1n).toString();
      await tx.sendOffsets({
        consumer: c,
        topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: next }] }],
      });
      await tx.commit();
    } catch (e) {
      await tx.abort().catch(() => undefined);
      throw e;
    }
    resolveOffset(batch.lastOffset());
    return batch.messages.length;
  };

  const plainBatch = async (
    p: Producer,
    c: Consumer,
    to: string,
    payload: EachBatchPayload,
  ): Promise<number> => {
    const { batch, resolveOffset } = payload;
    if (!batch.messages.length) return 0;
    await p.send({ topic: to, messages: batch.messages.map((m) => ({ key: m.key, value: m.value })) });
    resolveOffset(batch.lastOffset());
    const next = (BigInt(batch.lastOffset()) + 1n).toString();
    await c.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: next }]);
    return batch.messages.length;
  };

  const relay = async (o: RelayOptions, transactional: boolean): Promise<RelayResult> => {
    const kafka = kafkaOf(o.brokers);
    const p = producerOf(kafka, transactional ? o.group : undefined);
    await p.connect();
    const c = await consumerOf(kafka, o.group, o.source);
    let relayed = 0;
    let batches = 0;
    let t0 = 0;
    let t1 = 0;
    const done = new Promise<void>((resolve, reject) => {
      c.run({
        eachBatch: async (payload) => {
          if (relayed >= o.n) return;
          t0 ||= Date.now();
          batches++;
          relayed += transactional
            ? await txBatch(p, c, o.out, payload)
            : await plainBatch(p, c, o.out, payload);
          if (relayed >= o.n) {
            t1 = Date.now();
            resolve();
          }
        },
      }).catch(reject);
    });
    try {
      await done;
      return { secs: (t1 - t0) / 1000, batches };
    } finally {
      await c.disconnect();
      await p.disconnect();
    }
  };

  return {
    name: `@confluentinc/kafka-javascript ${version}`,
    batchedRelay: (o) => relay(o, false),
    transactionalRelay: (o) => relay(o, true),
    async startChain(o: ChainOptions): Promise<RunningChain> {
      const kafka = kafkaOf(o.brokers);
      const tx = producerOf(kafka, `${o.prefix}tx`);
      const plain = producerOf(kafka);
      const head = producerOf(kafka);
      const producers = [tx, plain, head];
      await Promise.all(producers.map((p) => p.connect()));
      const hop1 = await consumerOf(kafka, `${o.prefix}hop1`, o.head);
      const hop2 = await consumerOf(kafka, `${o.prefix}hop2`, o.mid);
      const sink = await consumerOf(kafka, `${o.prefix}sink`, o.tail);
      const consumers = [hop1, hop2, sink];
      await hop1.run({ eachBatch: async (payload) => void (await txBatch(tx, hop1, o.mid, payload)) });
      await hop2.run({ eachBatch: async (payload) => void (await plainBatch(plain, hop2, o.tail, payload)) });
      await sink.run({ eachMessage: async ({ message }) => o.onDone(message.key!.toString()) });
      return {
        async send(id) {
          await head.send({ topic: o.head, messages: [{ key: id, value: id }] });
        },
        async stop() {
          await Promise.all(consumers.map((c) => c.disconnect()));
          await Promise.all(producers.map((p) => p.disconnect()));
        },
      };
    },
  };
}
