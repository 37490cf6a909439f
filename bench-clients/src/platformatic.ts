import {
  Consumer,
  FetchIsolationLevels,
  MessagesStreamFallbackModes,
  MessagesStreamModes,
  ProduceAcks,
  Producer,
  compatibilityPartitioner,
  type Message,
  type MessagesStream,
} from '@platformatic/kafka';
import type { ChainOptions, ClientUnderTest, RelayOptions, RelayResult, RunningChain } from './types';

type Stream = MessagesStream<Buffer, Buffer, Buffer, Buffer>;
type Msg = Message<Buffer, Buffer, Buffer, Buffer>;

/** Records waiting to be handled at which the stream is paused (resumed when they are taken). */
const PAUSE_AT = 20_000;
/** Records per send (see chunks). */
const SEND_AT_MOST = 1_000;

/**
 * @platformatic/kafka 2.x (pure JavaScript), driven as its docs show (docs/producer.md, docs/consumer.md,
 * docs/transactions.md): a Producer with `idempotent` (and `transactionalId`), acks ALL, the Java-compatible
 * partitioner (its default murmur2 normalisation differs from Java's and kafkajs's: keyflow's keys would land on
 * other partitions); a Consumer whose `consume()` returns a MessagesStream, read_committed, `autocommit: false`,
 * committing with `message.commit()`; a transaction per batch with `beginTransaction`, `addConsumer`,
 * `send`, `addOffset` (a TxnOffsetCommit carrying the group's generation and member id), `commit`.
 * A "batch" is the records of one partition that arrived while the previous batch was handled (see batchesOf).
 */
export function platformaticClient(version: string): ClientUnderTest {
  const base = (brokers: string[]) => ({ clientId: 'bench-clients-platformatic', bootstrapBrokers: brokers });

  const producerOf = (brokers: string[], transactionalId?: string) =>
    new Producer({
      ...base(brokers),
      idempotent: true,
      acks: ProduceAcks.ALL,
      partitioner: compatibilityPartitioner,
      // The retry waits of keyflow's kafkajs producers (@keyflow/kafka TRANSACTIONAL_RETRY: 5 ms doubling up to
      // 5 s). The default, a fixed 1 s, made every transaction that followed a commit too closely (refused with
      // CONCURRENT_TRANSACTIONS) wait 1 s: the chain's p50 was 4.9 s at 50 records/s here.
      retryDelay: (_client: unknown, _operation: string, attempt: number) =>
        Math.min(5_000, 5 * 2 ** (attempt - 1)),
      ...(transactionalId ? { transactionalId } : {}),
    });

  const consumerOf = (brokers: string[], groupId: string) =>
    new Consumer({
      ...base(brokers),
      groupId,
      autocommit: false,
      isolationLevel: FetchIsolationLevels.READ_COMMITTED,
      minBytes: 1,
      maxWaitTime: 100,
      sessionTimeout: 10_000,
      heartbeatInterval: 1_000,
    });

  const streamOf = (c: Consumer, topic: string): Promise<Stream> =>
    c.consume({
      topics: [topic],
      mode: MessagesStreamModes.COMMITTED,
      fallbackMode: MessagesStreamFallbackModes.EARLIEST,
    }) as Promise<Stream>;

  /**
   * Batches of the records `s` emits ('data' events, as the docs read a stream), for a loop that handles one batch
   * at a time: `next()` resolves with the records that arrived since the last call, waiting for at least one, split
   * by partition (as kafkajs's and librdkafka's eachBatch: one batch per partition); `undefined` once the stream has
   * closed. The stream is paused while `PAUSE_AT` records wait.
   */
  const batchesOf = (s: Stream): (() => Promise<Msg[][] | undefined>) => {
    let waiting: Msg[] = [];
    let wake: (() => void) | undefined;
    let closed = false;
    s.on('data', (m: Msg) => {
      waiting.push(m);
      if (waiting.length >= PAUSE_AT) s.pause();
      wake?.();
    });
    s.on('close', () => {
      closed = true;
      wake?.();
    });
    return async () => {
      while (!waiting.length) {
        if (closed) return undefined;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
      const taken = waiting;
      waiting = [];
      if (s.isPaused()) s.resume();
      const byPartition = new Map<string, Msg[]>();
      for (const m of taken) {
        const key = `${m.topic}:${m.partition}`;
        const batch = byPartition.get(key);
        if (batch) batch.push(m);
        else byPartition.set(key, [m]);
      }
      return [...byPartition.values()];
    };
  };

  /**
   * `batch` in sends of at most SEND_AT_MOST records: this bench's platformatic batches hold 10,000 records and more,
   * and one send of 10,000 records of 200 B is one record batch of about 2 MB, refused by the broker
   * (MESSAGE_TOO_LARGE, over its 1 MB message.max.bytes); 4,167 records in one send pass.
   */
  const chunks = (batch: Msg[]): Msg[][] =>
    Array.from({ length: Math.ceil(batch.length / SEND_AT_MOST) }, (_, i) =>
      batch.slice(i * SEND_AT_MOST, (i + 1) * SEND_AT_MOST),
    );

  /** The last record of each partition in `batch`. */
  const lastPerPartition = (batch: Msg[]): Msg[] => {
    const last = new Map<string, Msg>();
    for (const m of batch) last.set(`${m.topic}:${m.partition}`, m);
    return [...last.values()];
  };

  const txBatch = async (p: Producer, c: Consumer, to: string, batch: Msg[]): Promise<void> => {
    const tx = await p.beginTransaction();
    try {
      await tx.addConsumer(c);
      for (const part of chunks(batch))
        await tx.send({ messages: part.map((m) => ({ topic: to, key: m.key, value: m.value })) });
      for (const m of lastPerPartition(batch)) await tx.addOffset(m);
      await tx.commit();
    } catch (e) {
      await tx.abort().catch(() => undefined);
      throw e;
    }
  };

  const plainBatch = async (p: Producer, to: string, batch: Msg[]): Promise<void> => {
    for (const part of chunks(batch))
      await p.send({ messages: part.map((m) => ({ topic: to, key: m.key, value: m.value })) });
    for (const m of lastPerPartition(batch)) await m.commit();
  };

  /** Runs `each` on every batch of `s` until the stream closes or `each` returns true; rejects on its error. */
  const loop = async (s: Stream, each: (batch: Msg[]) => Promise<boolean | void>): Promise<void> => {
    const next = batchesOf(s);
    for (;;) {
      const batches = await next();
      if (!batches) return;
      for (const batch of batches) if (await each(batch)) return;
    }
  };

  const relay = async (o: RelayOptions, transactional: boolean): Promise<RelayResult> => {
    const p = producerOf(o.brokers, transactional ? o.group : undefined);
    const c = consumerOf(o.brokers, o.group);
    try {
      const s = await streamOf(c, o.source);
      let relayed = 0;
      let batches = 0;
      let t0 = 0;
      await loop(s, async (batch) => {
        t0 ||= Date.now();
        batches++;
        if (transactional) await txBatch(p, c, o.out, batch);
        else await plainBatch(p, o.out, batch);
        relayed += batch.length;
        return relayed >= o.n;
      });
      const secs = (Date.now() - t0) / 1000;
      if (relayed < o.n) throw new Error(`stream closed after ${relayed} of ${o.n} records`);
      return { secs, batches };
    } finally {
      await c.close(true);
      await p.close();
    }
  };

  return {
    name: `@platformatic/kafka ${version}`,
    batchedRelay: (o) => relay(o, false),
    transactionalRelay: (o) => relay(o, true),
    async startChain(o: ChainOptions): Promise<RunningChain> {
      const tx = producerOf(o.brokers, `${o.prefix}tx`);
      const plain = producerOf(o.brokers);
      const head = producerOf(o.brokers);
      const hop1 = consumerOf(o.brokers, `${o.prefix}hop1`);
      const hop2 = consumerOf(o.brokers, `${o.prefix}hop2`);
      const sink = consumerOf(o.brokers, `${o.prefix}sink`);
      const [s1, s2, s3] = await Promise.all([
        streamOf(hop1, o.head),
        streamOf(hop2, o.mid),
        streamOf(sink, o.tail),
      ]);
      let failed: unknown;
      const seen = [0, 0, 0];
      const debug = (i: number, b: Msg[]) => {
        seen[i] += b.length;
        if (process.env.BENCH_CLIENTS_DEBUG) console.error(`hop ${i}: +${b.length} = ${seen[i]}`);
      };
      const loops = [
        loop(s1, (b) => (debug(0, b), txBatch(tx, hop1, o.mid, b))),
        loop(s2, (b) => (debug(1, b), plainBatch(plain, o.tail, b))),
        loop(s3, async (b) => (debug(2, b), b.forEach((m) => o.onDone(m.key.toString())))),
      ].map((l) => l.catch((e) => void (failed ??= e)));
      return {
        async send(id) {
          if (failed) throw failed;
          await head.send({ messages: [{ topic: o.head, key: Buffer.from(id), value: Buffer.from(id) }] });
        },
        async stop() {
          await Promise.all([hop1, hop2, sink].map((c) => c.close(true)));
          // A loop waiting for records ends when its stream closes; not awaited longer than 2 s (the streams of a
          // force-closed consumer did not always emit 'close' here).
          await Promise.race([Promise.all(loops), new Promise((r) => setTimeout(r, 2_000))]);
          await Promise.all([tx, plain, head].map((p) => p.close()));
        },
      };
    },
  };
}
