import {
  Collector,
  KCAT_CODECS,
  TestNamespace,
  ensureKcat,
  javaKafkaClient,
  produceWithJavaClient,
  produceWithKcat,
} from '@keyflow/testing';
import { createLogger } from '@keyflow/observability';
import { CompressionCodecs, CompressionTypes } from 'kafkajs';
import {
  KAFKA_CODEC_IDS,
  OrderedConsumer,
  UndecodableBatchError,
  guardedCodec,
  type ConsumedMessage,
  type KafkaCodec,
} from '../../src';

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
  let kcatMissing: string | undefined;
  beforeAll(async () => {
    kcatMissing = await ensureKcat().then(
      () => undefined,
      (e: Error) => e.message,
    );
  });
  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.stop(5_000)));
  });
  afterAll(() => ns.cleanup());

  it.each(KCAT_CODECS)('are read by the ordered consumer when compressed with %s', async (codec) => {
    if (kcatMissing) return console.warn(`skipped: ${kcatMissing}`);
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

  it('a batch its codec rejects stops the consumer at once with UNDECODABLE_BATCH and no restart, instead of a retry loop', async () => {
    if (kcatMissing) return console.warn(`skipped: ${kcatMissing}`);
    // The broker refuses corrupt compressed batches on produce (Kafka 4.1: "This record has failed the validation on
    // broker"), so an undecodable batch on a topic means a codec gap on the reading side: here, an lz4 decompressor
    // that rejects every frame stands in for one, with kafkajs's real fetch path and runner around it.
    const [topic] = await ns.createTopics({ name: 'z-undecodable', numPartitions: 1 });
    await produceWithKcat({
      brokers: ns.infra.kafkaBrokers,
      topic,
      codec: 'lz4',
      records: [0, 1, 2].map((i) => ({ key: `k${i}`, value: Buffer.alloc(100, i) })),
    });
    const codecs = CompressionCodecs as Record<number, () => KafkaCodec>;
    const real = codecs[CompressionTypes.LZ4];
    codecs[CompressionTypes.LZ4] = guardedCodec(KAFKA_CODEC_IDS.lz4, () => ({
      compress: (e) => real().compress(e),
      decompress: () => Promise.reject(new Error('unsupported LZ4 frame feature (stand-in)')),
    }));
    try {
      const handled: ConsumedMessage[] = [];
      const c = new OrderedConsumer({
        kafka: ns.kafka,
        groupId: ns.groupId('z-undecodable'),
        topics: [topic],
        logger,
        handle: async (m) => void handled.push(m),
      });
      consumers.push(c);
      const crashed = new Promise<Error>((resolve) => c.onCrash(resolve));
      const t0 = Date.now();
      await c.start();
      const err = await crashed;
      expect(err).toBeInstanceOf(UndecodableBatchError);
      expect(err).toMatchObject({
        code: 'UNDECODABLE_BATCH',
        retryable: false,
        codecId: KAFKA_CODEC_IDS.lz4,
        batch: { baseOffset: '0', lastOffset: '2', records: 3 },
      });
      // An ordinary Error here is retried for about 24 s, and then the consumer is restarted for ever (see codecs.ts).
      expect(Date.now() - t0).toBeLessThan(15_000);
      expect(c.healthy()).toBe(false);
      expect(handled).toEqual([]);
    } finally {
      codecs[CompressionTypes.LZ4] = real;
    }
  });
});
