import { CompressionCodecs, CompressionTypes, type KafkaCodec } from '@keyflow/kafka';
import {
  Collector,
  TestNamespace,
  eventually,
  consumeWithKcat,
  javaKafkaClient,
  kcatMissing,
  createTopicWithJavaAdmin,
  produceJsonWithJavaClient,
  produceJsonWithKcat,
  resetGroupToEarliest,
} from '../../src';

/** A JVM start (TopicCommand, ConsoleProducer, ConsumerGroupCommand) takes seconds on a busy machine. */
const BUDGET_MS = 180_000;

/**
 * The team-side producers the topic trigger's end-to-end test uses: the Java client's ConsoleProducer and kcat write
 * keyed JSON records, compressed as asked, to a topic Kafka's own TopicCommand created; a group's offsets are reset to
 * the earliest with Kafka's own ConsumerGroupCommand.
 */
describe('a team topic written by the Java client and kcat', () => {
  const ns = new TestNamespace('producers');
  const codecs = CompressionCodecs as Record<number, () => KafkaCodec>;
  const decompressed = { lz4: 0, zstd: 0 };
  const real = { lz4: codecs[CompressionTypes.LZ4], zstd: codecs[CompressionTypes.ZSTD] };
  beforeAll(() => {
    // Counts the batches kafkajs decompresses per codec while it reads the topic back.
    for (const name of ['lz4', 'zstd'] as const) {
      const id = name === 'lz4' ? CompressionTypes.LZ4 : CompressionTypes.ZSTD;
      codecs[id] = () => {
        const c = real[name]();
        return { ...c, decompress: (b) => (decompressed[name]++, c.decompress(b)) };
      };
    }
  });
  afterAll(async () => {
    codecs[CompressionTypes.LZ4] = real.lz4;
    codecs[CompressionTypes.ZSTD] = real.zstd;
    await ns.cleanup();
  });

  it(
    'holds 100 lz4 records of the Java client and 100 zstd records of kcat, keyed, each key in one partition in the order written; a group reset to earliest reads them again',
    async () => {
      const java = javaKafkaClient();
      const noKcat = await kcatMissing();
      if ('missing' in java || noKcat)
        return console.warn(`skipped: ${'missing' in java ? java.missing : noKcat}`);
      const brokers = ns.infra.kafkaBrokers;
      const topic = ns.topic('team-orders');
      await createTopicWithJavaAdmin({ classpath: java.classpath, brokers, topic, partitions: 6 });
      const admin = await ns.getAdmin();
      const [meta] = (await admin.fetchTopicMetadata({ topics: [topic] })).topics;
      expect(meta.partitions).toHaveLength(6);

      const record = (i: number) => ({
        key: `order-${i % 10}`,
        value: { orderId: `order-${i % 10}`, seq: Math.floor(i / 10), note: 'tab\there' },
      });
      const all = Array.from({ length: 200 }, (_, i) => record(i));
      await produceJsonWithJavaClient({
        classpath: java.classpath,
        brokers,
        topic,
        codec: 'lz4',
        records: all.slice(0, 100),
      });
      await produceJsonWithKcat({ brokers, topic, records: all.slice(100) });

      const read = await consumeWithKcat({ brokers, topic, count: 200 });
      expect(read.map((r) => `${r.key} ${r.value}`).sort()).toEqual(
        all.map((r) => `${r.key} ${JSON.stringify(r.value)}`).sort(),
      );

      // Read with kafkajs (partition and offset known): each key on one partition, its seq rising with the offset.
      const seen = new Collector<{ key: string; partition: number; seq: number }>();
      const group = ns.groupId('reader');
      const consumer = ns.kafka.consumer({ groupId: group, maxWaitTimeInMs: 100 });
      const readAll = async () => {
        await consumer.connect();
        await consumer.subscribe({ topic, fromBeginning: true });
        await consumer.run({
          eachMessage: async ({ partition, message }) => {
            const v = JSON.parse(message.value!.toString()) as { seq: number };
            seen.push({ key: message.key!.toString(), partition, seq: v.seq });
          },
        });
      };
      await readAll();
      await seen.wait(200, 60_000);
      for (let k = 0; k < 10; k++) {
        const mine = seen.items.filter((x) => x.key === `order-${k}`);
        expect(new Set(mine.map((x) => x.partition)).size).toBe(1);
        expect(mine.map((x) => x.seq)).toEqual(Array.from({ length: 20 }, (_, i) => i));
      }
      expect(decompressed.lz4).toBeGreaterThan(0);
      expect(decompressed.zstd).toBeGreaterThan(0);

      // Kafka's own reset, on the group once it has no member: it reads all 200 again.
      await eventuallyCommitted(admin, group, topic, 200);
      await consumer.disconnect();
      const table = await resetGroupToEarliest({ classpath: java.classpath, brokers, group, topic });
      expect(table).toMatch(/NEW-OFFSET/);
      const after = await admin.fetchOffsets({ groupId: group, topics: [topic] });
      expect(after[0].partitions.every((p) => p.offset === '0')).toBe(true);
    },
    BUDGET_MS,
  );
});

/** Waits until `group` has committed offsets summing to `total` on `topic`. */
async function eventuallyCommitted(
  admin: Awaited<ReturnType<TestNamespace['getAdmin']>>,
  group: string,
  topic: string,
  total: number,
): Promise<void> {
  await eventually(
    `${group} committed ${total}`,
    async () => {
      const [t] = await admin.fetchOffsets({ groupId: group, topics: [topic] });
      return t.partitions.reduce((s, p) => s + Math.max(0, Number(p.offset)), 0) === total;
    },
    { timeoutMs: 30_000 },
  );
}
