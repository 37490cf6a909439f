import { Collector, KCAT_CODECS, TestNamespace, ensureKcat, produceWithKcat } from '@keyflow/testing';
import { createLogger } from '@keyflow/observability';
import { OrderedConsumer, type ConsumedMessage } from '../../src';

const logger = createLogger('test', { level: 'silent' });

/**
 * Records written by librdkafka (kcat) with each compression codec Kafka defines are read by the OrderedConsumer.
 * kafkajs alone reads only gzip: snappy, lz4 and zstd made its fetch throw and the consumer crash.
 */
describe('records compressed by a librdkafka producer', () => {
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
});
