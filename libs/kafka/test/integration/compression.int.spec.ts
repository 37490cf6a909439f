import {
  Collector,
  KCAT_CODECS,
  TestNamespace,
  kcatMissing,
  eventually,
  javaKafkaClient,
  produceWithJavaClient,
  produceWithKcat,
  consumeWithKcat,
  consumeWithJavaClient,
} from '@keyflow/testing';
import { ComponentHealth, createLogger } from '@keyflow/observability';
import { CompressionCodecs, CompressionTypes } from 'kafkajs';
import {
  BatchingProducer,
  COMPRESSION_SETTING,
  KAFKA_CODEC_IDS,
  OrderedConsumer,
  guardedCodec,
  type ConsumedMessage,
  type KafkaCodec,
} from '../../src';
import { gapsFrom, kafkaTimingFetches } from './consumer-spy';

const logger = createLogger('test', { level: 'silent' });
/** A test that starts a JVM (the Java client) gets this long, in ms: a JVM start takes seconds on a busy machine. */
const JVM_START_BUDGET_MS = 30_000;

/**
 * Records written by librdkafka (kcat) and by the Java client with each codec Kafka defines are read by the OrderedConsumer.
 * kafkajs alone reads only gzip: snappy, lz4 and zstd made its fetch throw and the consumer crash.
 */
describe('records compressed by other Kafka clients (librdkafka, Java)', () => {
  const ns = new TestNamespace('compression');
  const consumers: OrderedConsumer[] = [];
  let noKcat: string | undefined;
  beforeAll(async () => {
    noKcat = await kcatMissing();
  });
  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.stop(5_000)));
  });
  afterAll(() => ns.cleanup());

  it.each(KCAT_CODECS)('are read by the ordered consumer when compressed with %s', async (codec) => {
    if (noKcat) return console.warn(`skipped: ${noKcat}`);
    const [topic] = await ns.createTopics({ name: `z-${codec}`, numPartitions: 2 });
    // Binary values, repetitive enough that every codec really compresses them.
    const records = Array.from({ length: 20 }, (_, i) => ({
      key: `k${i % 4}`,
      value: Buffer.concat([Buffer.from([0, 0, 0, 0, i]), Buffer.alloc(200, i)]),
    }));
    await produceWithKcat({ brokers: ns.infra.kafkaBrokers, topic, codec, records });

    const seen = new Collector<ConsumedMessage>();
    const c = new OrderedConsumer({
      kafka: ns.kafka,
      groupId: ns.groupId(`z-${codec}`),
      topics: [topic],
      logger,
      handle: async (m) => seen.push(m),
    });
    consumers.push(c);
    await c.start();
    const got = await seen.wait(records.length, 20_000);

    const byValue = (a: { value: Buffer | null }, b: { value: Buffer | null }) =>
      Buffer.compare(a.value!, b.value!);
    expect(got.map((m) => ({ key: m.key!.toString(), value: m.value })).sort(byValue)).toEqual(
      [...records].sort(byValue),
    );
    expect(c.stats().crashed).toBeUndefined();
  });

  it.each(KCAT_CODECS)(
    'are read by the ordered consumer when the Java client compressed them with %s',
    async (codec) => {
      const java = javaKafkaClient();
      if ('missing' in java) return console.warn(`skipped: ${java.missing}`);
      const [topic] = await ns.createTopics({ name: `j-${codec}`, numPartitions: 1 });
      const records = Array.from({ length: 10 }, (_, i) => ({
        key: `k${i % 3}`,
        value: `${codec}-${i}-${'x'.repeat(100)}`,
      }));
      await produceWithJavaClient({
        classpath: java.classpath,
        brokers: ns.infra.kafkaBrokers,
        topic,
        codec,
        records,
      });

      const seen = new Collector<ConsumedMessage>();
      const c = new OrderedConsumer({
        kafka: ns.kafka,
        groupId: ns.groupId(`j-${codec}`),
        topics: [topic],
        logger,
        handle: async (m) => seen.push(m),
      });
      consumers.push(c);
      await c.start();
      const got = await seen.wait(records.length, 20_000);
      expect(got.map((m) => ({ key: m.key!.toString(), value: m.value!.toString() }))).toEqual(records);
    },
    JVM_START_BUDGET_MS,
  );

  it('a batch its codec rejects pauses only its partition, named in stats and health, and is read in order once the codec is fixed', async () => {
    if (noKcat) return console.warn(`skipped: ${noKcat}`);
    // The broker refuses corrupt compressed batches on produce (Kafka 4.1: "This record has failed the validation on
    // broker"), so an undecodable batch on a topic means a codec gap on the reading side: here, an lz4 decompressor
    // that rejects every frame stands in for one, with kafkajs's real fetch path and runner around it.
    const [topic] = await ns.createTopics({ name: 'z-undecodable', numPartitions: 2 });
    const brokers = ns.infra.kafkaBrokers;
    const rec = (k: string) => ({ key: k, value: Buffer.alloc(100, k.charCodeAt(1)) });
    // Partition 0: a gzip record, then an lz4 batch (undecodable for now), then gzip again; partition 1: gzip only.
    await produceWithKcat({ brokers, topic, codec: 'gzip', partition: 0, records: [rec('a0')] });
    await produceWithKcat({
      brokers,
      topic,
      codec: 'lz4',
      partition: 0,
      records: [rec('b1'), rec('b2'), rec('b3')],
    });
    await produceWithKcat({ brokers, topic, codec: 'gzip', partition: 0, records: [rec('c4')] });
    await produceWithKcat({ brokers, topic, codec: 'gzip', partition: 1, records: [rec('d0'), rec('d1')] });
    const codecs = CompressionCodecs as Record<number, () => KafkaCodec>;
    const real = codecs[CompressionTypes.LZ4];
    let fixed = false;
    codecs[CompressionTypes.LZ4] = guardedCodec(KAFKA_CODEC_IDS.lz4, () => ({
      compress: (e) => real().compress(e),
      decompress: (b) =>
        fixed ? real().decompress(b) : Promise.reject(new Error('unsupported LZ4 frame feature (stand-in)')),
    }));
    try {
      const health = new ComponentHealth();
      const handled = new Collector<string>();
      // When each fetch request is sent: a partition held by the quarantine must not make the consumer poll at
      // fetchMaxWaitMs (100 ms here) until the batch's retry; the rest long-poll at idleFetchMaxWaitMs.
      const fetches: number[] = [];
      const kafka = kafkaTimingFetches(ns.kafka, fetches);
      const c = new OrderedConsumer({
        kafka,
        groupId: ns.groupId('z-undecodable'),
        topics: [topic],
        logger,
        health,
        fetchMaxWaitMs: 100,
        idleFetchMaxWaitMs: 1_000,
        undecodableRetryMs: 5_000,
        handle: async (m) => handled.push(`${m.partition}:${m.key!.toString()}`),
      });
      consumers.push(c);
      let crashed: Error | undefined;
      c.onCrash((e) => (crashed = e));
      await c.start();
      // Everything decodable is read: partition 1 whole, partition 0 up to the bad batch, and nothing after it.
      await handled.wait(3, 20_000);
      const quarantined = await eventually('partition 0 quarantined', async () => c.stats().quarantined, {
        until: (q) => q.length === 1,
      });
      expect(quarantined[0]).toMatchObject({
        topic,
        partition: 0,
        code: 'UNDECODABLE_BATCH',
        codecId: KAFKA_CODEC_IDS.lz4,
        baseOffset: '1',
        lastOffset: '3',
      });
      expect(health.degraded()).toEqual([
        expect.objectContaining({ code: 'UNDECODABLE_BATCH', error: expect.stringContaining(`${topic}:0`) }),
      ]);
      expect(handled.items.slice().sort()).toEqual(['0:a0', '1:d0', '1:d1']);
      expect(c.healthy()).toBe(true);
      const from = fetches.length;
      await eventually('three fetches while quarantined', () => fetches.length, {
        until: (n) => n >= from + 3,
      });
      expect(c.stats().quarantined).toHaveLength(1); // still held: the retry is 5 s away
      const gaps = gapsFrom(fetches, from);
      expect(Math.min(...gaps)).toBeGreaterThanOrEqual(500);
      // The fix: the codec reads the batch now. The periodic retry resumes the partition, in offset order.
      fixed = true;
      await handled.wait(7, 20_000);
      expect(handled.items.filter((x) => x.startsWith('0:'))).toEqual([
        '0:a0',
        '0:b1',
        '0:b2',
        '0:b3',
        '0:c4',
      ]);
      await eventually('quarantine lifted', async () => c.stats().quarantined, {
        until: (q) => q.length === 0,
      });
      expect(health.degraded()).toEqual([]);
      expect(crashed).toBeUndefined();
    } finally {
      codecs[CompressionTypes.LZ4] = real;
    }
  }, 30_000);
});

describe('records keyflow writes with KEYFLOW_COMPRESSION=zstd', () => {
  const ns = new TestNamespace('write-zstd');
  const codecs = CompressionCodecs as Record<number, () => KafkaCodec>;
  const registered = codecs[CompressionTypes.ZSTD];
  let zstdBatches = 0;
  beforeAll(() => {
    // Counts the record batches kafkajs compresses with zstd, through keyflow's registered codec.
    codecs[CompressionTypes.ZSTD] = () => {
      const c = registered();
      return { ...c, compress: (encoder) => (zstdBatches++, c.compress(encoder)) };
    };
  });
  afterAll(async () => {
    codecs[CompressionTypes.ZSTD] = registered;
    delete process.env[COMPRESSION_SETTING];
    await ns.cleanup();
  });

  it(
    'are zstd batches that librdkafka (kcat) and the Java client read back',
    async () => {
      const noKcat = await kcatMissing();
      if (noKcat) return console.warn(`skipped: ${noKcat}`);
      const [topic] = await ns.createTopics({ name: 'w-zstd', numPartitions: 2 });
      const records = Array.from({ length: 30 }, (_, i) => ({
        key: `k${i % 5}`,
        value: `zstd-${i}-${'keyflow '.repeat(40)}`,
      }));
      process.env[COMPRESSION_SETTING] = 'zstd';
      const producer = ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      try {
        await new BatchingProducer(producer).sendAll(
          topic,
          records.map((r) => ({ key: r.key, value: r.value })),
        );
      } finally {
        await producer.disconnect();
      }
      expect(zstdBatches).toBeGreaterThan(0);

      const byKeyValue = (a: { key: string; value: string }, b: { key: string; value: string }) =>
        `${a.key} ${a.value}`.localeCompare(`${b.key} ${b.value}`);
      const sorted = [...records].sort(byKeyValue);
      const kcat = await consumeWithKcat({ brokers: ns.infra.kafkaBrokers, topic, count: records.length });
      expect(kcat.sort(byKeyValue)).toEqual(sorted);

      const java = javaKafkaClient();
      if ('missing' in java) return console.warn(`Java client part skipped: ${java.missing}`);
      const read = await consumeWithJavaClient({
        classpath: java.classpath,
        brokers: ns.infra.kafkaBrokers,
        topic,
        count: records.length,
      });
      expect(read.sort(byKeyValue)).toEqual(sorted);
    },
    JVM_START_BUDGET_MS * 3,
  );
});
