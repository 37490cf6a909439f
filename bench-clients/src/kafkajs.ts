import { Kafka, logLevel, type Consumer, type EachBatchPayload, type Producer } from 'kafkajs';
import { TRANSACTIONAL_RETRY, createIdempotentProducer, whileTransactionsConcurrent } from '@keyflow/kafka';
import type { ChainOptions, ClientUnderTest, RelayOptions, RelayResult, RunningChain } from './types';

/**
 * kafkajs 2.2.4 with keyflow's patch (the root's node_modules, patched by patch-package at install), driven as
 * keyflow drives it: producers from @keyflow/kafka's createIdempotentProducer (idempotent, one request in flight,
 * murmur2), transactional retries as the engine's (TRANSACTIONAL_RETRY, sendOffsets under
 * whileTransactionsConcurrent), consumers with eachBatch and autoCommit off.
 */
export function kafkajsClient(version: string): ClientUnderTest {
  const kafkaOf = (brokers: string[]) =>
    new Kafka({ brokers, clientId: 'bench-clients-kafkajs', logLevel: logLevel.NOTHING });

  const consumerOf = async (kafka: Kafka, groupId: string, topic: string): Promise<Consumer> => {
    const c = kafka.consumer({
      groupId,
      readUncommitted: false,
      minBytes: 1,
      maxWaitTimeInMs: 100,
      sessionTimeout: 10_000,
      heartbeatInterval: 1_000,
    });
    await c.connect();
    await c.subscribe({ topic, fromBeginning: true });
    return c;
  };

  const transactionalProducerOf = (kafka: Kafka, transactionalId: string): Producer =>
    kafka.producer({
      transactionalId,
      idempotent: true,
      maxInFlightRequests: 1,
      retry: TRANSACTIONAL_RETRY,
    });

  /** One transaction per batch: sendBatch, sendOffsets (kafkajs sends the group's generation), commit. */
  const txBatch = async (
    p: Producer,
    groupId: string,
    to: string,
    payload: EachBatchPayload,
  ): Promise<number> => {
    const { batch, resolveOffset } = payload;
    if (!batch.messages.length) return 0;
    const tx = await p.transaction();
    try {
      await tx.send({
        topic: to,
        acks: -1,
        messages: batch.messages.map((m) => ({ key: m.key, value: m.value })),
      });
      const next = (BigInt(batch.lastOffset()) + 1n).toString();
      await whileTransactionsConcurrent(() =>
        tx.sendOffsets({
          consumerGroupId: groupId,
          topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: next }] }],
        }),
      );
      await tx.commit();
    } catch (e) {
      await tx.abort().catch(() => undefined);
      throw e;
    }
    resolveOffset(batch.lastOffset());
    return batch.messages.length;
  };

  /** A plain batch: acks=all idempotent send, then the offset commit. */
  const plainBatch = async (p: Producer, to: string, payload: EachBatchPayload): Promise<number> => {
    const { batch, resolveOffset, commitOffsetsIfNecessary } = payload;
    if (!batch.messages.length) return 0;
    await p.send({
      topic: to,
      acks: -1,
      messages: batch.messages.map((m) => ({ key: m.key, value: m.value })),
    });
    resolveOffset(batch.lastOffset());
    await commitOffsetsIfNecessary();
    return batch.messages.length;
  };

  const relay = async (o: RelayOptions, transactional: boolean): Promise<RelayResult> => {
    const kafka = kafkaOf(o.brokers);
    const p = transactional ? transactionalProducerOf(kafka, o.group) : createIdempotentProducer(kafka);
    await p.connect();
    const c = await consumerOf(kafka, o.group, o.source);
    let relayed = 0;
    let batches = 0;
    let t0 = 0;
    let t1 = 0;
    const done = new Promise<void>((resolve, reject) => {
      c.run({
        autoCommit: false,
        eachBatch: async (payload) => {
          if (relayed >= o.n) return;
          t0 ||= Date.now();
          batches++;
          relayed += transactional
            ? await txBatch(p, o.group, o.out, payload)
            : await plainBatch(p, o.out, payload);
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
    name: `kafkajs ${version} + keyflow patch`,
    batchedRelay: (o) => relay(o, false),
    transactionalRelay: (o) => relay(o, true),
    async startChain(o: ChainOptions): Promise<RunningChain> {
      const kafka = kafkaOf(o.brokers);
      const producers: Producer[] = [];
      const consumers: Consumer[] = [];
      const tx = transactionalProducerOf(kafka, `${o.prefix}tx`);
      const plain = createIdempotentProducer(kafka);
      const head = createIdempotentProducer(kafka);
      producers.push(tx, plain, head);
      await Promise.all(producers.map((p) => p.connect()));
      const hop1 = await consumerOf(kafka, `${o.prefix}hop1`, o.head);
      const hop2 = await consumerOf(kafka, `${o.prefix}hop2`, o.mid);
      const sink = await consumerOf(kafka, `${o.prefix}sink`, o.tail);
      consumers.push(hop1, hop2, sink);
      await hop1.run({
        autoCommit: false,
        eachBatch: async (payload) => void (await txBatch(tx, `${o.prefix}hop1`, o.mid, payload)),
      });
      await hop2.run({
        autoCommit: false,
        eachBatch: async (payload) => void (await plainBatch(plain, o.tail, payload)),
      });
      await sink.run({ eachMessage: async ({ message }) => o.onDone(message.key!.toString()) });
      return {
        async send(id) {
          await head.send({ topic: o.head, acks: -1, messages: [{ key: id, value: id }] });
        },
        async stop() {
          await Promise.all(consumers.map((c) => c.disconnect()));
          await Promise.all(producers.map((p) => p.disconnect()));
        },
      };
    },
  };
}
