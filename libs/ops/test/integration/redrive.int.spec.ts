import { createIdempotentProducer, type KafkaMessage, type Producer } from '@keyflow/kafka';
import { createLogger } from '@keyflow/observability';
import { Collector, TestNamespace } from '@keyflow/testing';
import { EventCodec } from '@keyflow/contracts';
import { randomBytes } from 'node:crypto';
import {
  alignDlqLimits,
  dlqRetention,
  dlqMessage,
  sendToDlq,
  dlqTopicFor,
  listDlqTopics,
  readDlqLedger,
  readDlqRecords,
  redrive,
  summarizeDlqs,
  type RedriveFilter,
  type RedriveReport,
} from '../../src';

jest.setTimeout(90_000);

/** Fails instead of hanging: the bug this file reproduces is a redrive that never returns. */
const within = <T>(ms: number, what: string, p: Promise<T>) =>
  Promise.race([
    p,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms).unref(),
    ),
  ]);

describe('redrive of a DLQ written inside Kafka transactions (as the orchestrator writes wf.requests.dlq)', () => {
  const ns = new TestNamespace('redrive-tx');
  const codec = new EventCodec({
    registryUrl: process.env.SCHEMA_REGISTRY_URL!,
    topicPrefix: `${ns.prefix}.`,
  });
  const ledger = { codec, handledBy: 'redrive-test' };
  const producers: Producer[] = [];
  afterAll(async () => {
    await Promise.allSettled(producers.map((p) => p.disconnect()));
    await ns.cleanup();
  });

  it('finishes, republishes only the committed records (not the aborted ones, not those of an open transaction), and exits', async () => {
    const [original, dlq] = await ns.createTopics(
      { name: 'orig', numPartitions: 1 },
      { name: 'orig.dlq', numPartitions: 2 },
    );
    expect(dlq).toBe(dlqTopicFor(original));
    const record = (value: string, partition: number) => ({
      partition,
      ...dlqMessage(
        {
          topic: original,
          partition: 0,
          offset: '0',
          key: Buffer.from(value),
          value: Buffer.from(value),
          headers: {},
        },
        {
          errorClass: 'InvalidRequestError',
          errorMessage: 'test',
          attempts: 1,
          firstFailureAt: Date.now(),
          lastFailureAt: Date.now(),
          consumerGroup: 'g',
        },
      ),
    });
    const txProducer = (id: string) => {
      const p = ns.kafka.producer({
        transactionalId: `${ns.prefix}-${id}`,
        idempotent: true,
        maxInFlightRequests: 1,
      });
      producers.push(p);
      return p;
    };
    const writer = txProducer('writer');
    await writer.connect();
    const inTx = async (messages: ReturnType<typeof record>[], end: 'commit' | 'abort') => {
      const tx = await writer.transaction();
      await tx.send({ topic: dlq, messages });
      await tx[end]();
    };
    // partition 0: committed, aborted, committed, aborted (its log ends with an abort marker)
    await inTx([record('c1', 0), record('c2', 0), record('c3', 1)], 'commit');
    await inTx([record('a1', 0), record('a2', 1)], 'abort');
    await inTx([record('c4', 0)], 'commit');
    await inTx([record('a3', 0)], 'abort');
    // partition 1: then a transaction left open while the redrive runs (its records are past the last stable offset)
    const other = txProducer('open');
    await other.connect();
    const open = await other.transaction();
    await open.send({ topic: dlq, messages: [record('o1', 1)] });

    const producer = createIdempotentProducer(ns.kafka);
    producers.push(producer);
    await producer.connect();
    const report: RedriveReport = await within(
      30_000,
      'the redrive',
      redrive(ns.kafka, {
        dlqTopic: dlq,
        producer,
        logger: createLogger('redrive-test'),
        ratePerSec: 1_000,
        ledger,
      }),
    );
    await open.abort();

    expect(report).toMatchObject({ scanned: 4, moved: 4, skipped: 0, byTopic: { [original]: 4 } });
    // What landed on the original topic: exactly the committed records, once each.
    const got = new Collector<KafkaMessage>();
    const reader = ns.kafka.consumer({ groupId: ns.groupId('reader') });
    await reader.connect();
    await reader.subscribe({ topic: original, fromBeginning: true });
    await reader.run({ eachMessage: async ({ message }) => got.push(message) });
    const admin = await ns.getAdmin();
    const [{ high }] = await admin.fetchTopicOffsets(original);
    expect(Number(high)).toBe(4);
    const values = (await got.wait(4)).map((m) => m.value!.toString()).sort();
    await reader.disconnect();
    expect(values).toEqual(['c1', 'c2', 'c3', 'c4']);

    // The ledger now names the four: they no longer count as pending, and a second redrive leaves them alone.
    const handled = await readDlqLedger(ns.kafka, codec);
    expect([...handled.values()].map((e) => e.action)).toEqual([
      'REDRIVEN',
      'REDRIVEN',
      'REDRIVEN',
      'REDRIVEN',
    ]);
    const [summary] = await summarizeDlqs(ns.kafka, [dlq], { handled });
    expect(summary).toMatchObject({ records: 4, pending: 0, oldest: null });
    const again = await redrive(ns.kafka, {
      dlqTopic: dlq,
      producer,
      logger: createLogger('redrive-test'),
      ledger,
    });
    expect(again).toMatchObject({ scanned: 4, moved: 0, alreadyHandled: 4 });
    const [{ high: after }] = await admin.fetchTopicOffsets(original);
    expect(Number(after)).toBe(4);
  });
});

describe('redrive of a record at the size limit of its topic', () => {
  const ns = new TestNamespace('redrive-limit');
  const codec = new EventCodec({
    registryUrl: process.env.SCHEMA_REGISTRY_URL!,
    topicPrefix: `${ns.prefix}.`,
  });
  afterAll(() => ns.cleanup());

  it('puts back a record its topic accepted at exactly its limit (incompressible bytes), without the redrive count if that does not fit', async () => {
    const [original, dlq] = await ns.createTopics(
      { name: 'tight', numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '2048' }] },
      { name: 'tight.dlq', numPartitions: 1, configEntries: [{ name: 'max.message.bytes', value: '8192' }] },
    );
    const producer = createIdempotentProducer(ns.kafka);
    await producer.connect();
    try {
      // The largest random value the topic accepts: found by asking the broker, so the test holds for any overhead.
      let value = randomBytes(2048);
      for (;;) {
        const ok = await producer
          .send({ topic: original, acks: -1, messages: [{ key: 'k', value }] })
          .then(() => true)
          .catch(() => false);
        if (ok) break;
        value = value.subarray(0, value.length - 1);
      }
      await sendToDlq(
        producer,
        {
          topic: original,
          partition: 0,
          offset: '0',
          key: Buffer.from('k'),
          value,
          headers: {},
          timestamp: '0',
        },
        {
          errorClass: 'Boom',
          errorMessage: 'test',
          attempts: 1,
          firstFailureAt: 1,
          lastFailureAt: 1,
          consumerGroup: 'g',
        },
      );
      const report = await redrive(ns.kafka, {
        dlqTopic: dlq,
        producer,
        logger: createLogger('redrive-test', { level: 'silent' }),
        ledger: { codec, handledBy: 'redrive-test' },
      });
      expect(report).toMatchObject({ moved: 1, tooLarge: 0 });
      const got = new Collector<KafkaMessage>();
      const reader = ns.kafka.consumer({ groupId: ns.groupId('reader') });
      await reader.connect();
      await reader.subscribe({ topic: original, fromBeginning: true });
      await reader.run({ eachMessage: async ({ message }) => void got.push(message) });
      const [first, again] = await got.wait(2).finally(() => reader.disconnect());
      expect(again.value!.equals(first.value!)).toBe(true);
    } finally {
      await producer.disconnect();
    }
  });
});

/** The triage of a DLQ record the tests below write (a command no retry fixes). */
const DEAD_LETTER = {
  errorClass: 'TaskInputError',
  errorMessage: 'bad',
  attempts: 1,
  firstFailureAt: 1,
  lastFailureAt: 2,
  consumerGroup: 'g',
};

describe("DLQ tools act only on this deployment's DLQs and redrive only to a DLQ's own source topic", () => {
  const ns = new TestNamespace('redrive-own');
  const prefix = `${ns.prefix}.`;
  const codec = new EventCodec({ registryUrl: process.env.SCHEMA_REGISTRY_URL!, topicPrefix: prefix });
  let producer: Producer;
  beforeAll(async () => {
    producer = createIdempotentProducer(ns.kafka);
    await producer.connect();
  });
  afterAll(async () => {
    await producer?.disconnect();
    await ns.cleanup();
  });

  it('lists only the catalog DLQs under the prefix, and refuses a record naming another topic, with the reason', async () => {
    const [charge, chargeDlq, , , elsewhere] = await ns.createTopics(
      { name: 'task.charge', numPartitions: 1 },
      { name: 'task.charge.dlq', numPartitions: 1 },
      { name: 'orders.dlq', numPartitions: 1 }, // another application's DLQ in the same cluster
      { name: 'wf.events.dlq', numPartitions: 1 },
      { name: 'elsewhere', numPartitions: 1 },
    );
    expect(await listDlqTopics(ns.kafka, prefix)).toEqual([chargeDlq]);
    expect(await listDlqTopics(ns.kafka, prefix, new Set(['wf.requests.dlq']))).toEqual([]);

    const at = (topic: string, key: string) =>
      dlqMessage(
        { topic, partition: 0, offset: '0', key: Buffer.from(key), value: Buffer.from(key), headers: {} },
        DEAD_LETTER,
      );
    await producer.send({
      topic: chargeDlq,
      acks: -1,
      messages: [at(charge, 'own'), at(elsewhere, 'foreign')],
    });

    const report = await redrive(ns.kafka, {
      dlqTopic: chargeDlq,
      producer,
      logger: createLogger('redrive', { level: 'silent' }),
      ledger: { codec, handledBy: 'redrive-test' },
    });
    expect(report).toMatchObject({ scanned: 2, moved: 1, refused: 1, byTopic: { [charge]: 1 } });
    expect(report.refusals).toEqual([
      expect.objectContaining({
        key: 'foreign',
        code: 'NOT_OWN_SOURCE',
        reason: expect.stringContaining(`names ${elsewhere}, not ${charge}`),
      }),
    ]);
    expect(report.redriven).toEqual([expect.objectContaining({ key: 'own', topic: charge })]);
    const admin = ns.kafka.admin();
    await admin.connect();
    const [end] = await admin.fetchTopicOffsets(elsewhere);
    await admin.disconnect();
    expect(end.high).toBe('0');

    // A caller's own check (the run's status): what it refuses stays pending, named with its reason.
    const checked = await redrive(ns.kafka, {
      dlqTopic: chargeDlq,
      producer,
      includeHandled: true,
      dryRun: true,
      logger: createLogger('redrive', { level: 'silent' }),
      ledger: { codec, handledBy: 'redrive-test' },
      admit: async (m) =>
        m.key?.toString() === 'own' ? { code: 'RUN_ENDED', reason: 'run own is compensated' } : undefined,
    });
    expect(checked).toMatchObject({ moved: 0, refused: 2 });
    expect(checked.refusals.map((r) => r.code).sort()).toEqual(['NOT_OWN_SOURCE', 'RUN_ENDED']);
  });

  it('refuses every record of a DLQ whose source topic does not exist (a task type only local steps run), in a dry run too, naming it, and creates no topic', async () => {
    // The orchestrator dead-letters a local step's command to task.<type>.dlq; no task.<type> topic exists for a type
    // no worker runs. A redrive there would fail at the send (or, on a broker that creates topics on first use, leave
    // the command in a topic nothing reads): it is refused with the way out instead.
    const [localDlq] = await ns.createTopics({ name: 'task.local-only.dlq', numPartitions: 1 });
    const source = `${prefix}task.local-only`;
    const failure = {
      errorClass: 'TaskInputError',
      errorMessage: 'bad',
      attempts: 1,
      firstFailureAt: 1,
      lastFailureAt: 2,
      consumerGroup: 'orchestrator',
    };
    await producer.send({
      topic: localDlq,
      acks: -1,
      messages: ['run-1', 'run-2'].map((key) =>
        dlqMessage(
          {
            topic: source,
            partition: 0,
            offset: '0',
            key: Buffer.from(key),
            value: Buffer.from(key),
            headers: {},
          },
          failure,
        ),
      ),
    });
    const refusedBoth = ['run-1', 'run-2'].map((key) =>
      expect.objectContaining({
        key,
        code: 'SOURCE_TOPIC_MISSING',
        reason: expect.stringContaining(`${source} does not exist`),
      }),
    );
    // A dry run, what an operator runs first, shows the same refusals and sends nothing.
    const preview = await redrive(ns.kafka, {
      dlqTopic: localDlq,
      producer,
      dryRun: true,
      logger: createLogger('redrive', { level: 'silent' }),
      ledger: { codec, handledBy: 'redrive-test' },
    });
    expect(preview).toMatchObject({ dryRun: true, scanned: 2, moved: 0, refused: 2 });
    expect(preview.refusals).toEqual(refusedBoth);
    const report = await redrive(ns.kafka, {
      dlqTopic: localDlq,
      producer,
      logger: createLogger('redrive', { level: 'silent' }),
      ledger: { codec, handledBy: 'redrive-test' },
    });
    expect(report).toMatchObject({ scanned: 2, moved: 0, refused: 2 });
    expect(report.refusals).toEqual(refusedBoth);
    const admin = ns.kafka.admin();
    await admin.connect();
    const topics = await admin.listTopics();
    await admin.disconnect();
    expect(topics).not.toContain(source);
    // Both stay pending: a discard still marks them handled.
    const discarded = await redrive(ns.kafka, {
      dlqTopic: localDlq,
      producer,
      action: 'DISCARDED',
      logger: createLogger('redrive', { level: 'silent' }),
      ledger: { codec, handledBy: 'redrive-test' },
    });
    expect(discarded).toMatchObject({ moved: 2, refused: 0 });
  });

  it('a redrive narrowed to a partition or an offset reads only what its filter can match: one record, one partition, nothing past the end', async () => {
    const [original, dlq] = await ns.createTopics(
      { name: 'task.narrow', numPartitions: 1 },
      { name: 'task.narrow.dlq', numPartitions: 2 },
    );
    const at = (key: string, partition: number) => ({
      partition,
      ...dlqMessage(
        {
          topic: original,
          partition: 0,
          offset: '0',
          key: Buffer.from(key),
          value: Buffer.from(key),
          headers: {},
        },
        DEAD_LETTER,
      ),
    });
    await producer.send({
      topic: dlq,
      acks: -1,
      messages: [
        ...Array.from({ length: 30 }, (_, i) => at(`p0-${i}`, 0)),
        ...Array.from({ length: 7 }, (_, i) => at(`p1-${i}`, 1)),
      ],
    });
    const dryRun = (filter: RedriveFilter) =>
      redrive(ns.kafka, {
        dlqTopic: dlq,
        producer,
        dryRun: true,
        filter,
        logger: createLogger('redrive', { level: 'silent' }),
        ledger: { codec, handledBy: 'redrive-test' },
      });

    const one = await dryRun({ partition: 0, offset: '17' });
    expect(one).toMatchObject({ scanned: 1, moved: 1 });
    expect(one.redriven).toEqual([expect.objectContaining({ partition: 0, offset: '17', key: 'p0-17' })]);
    expect(await dryRun({ partition: 1 })).toMatchObject({ scanned: 7, moved: 7 });
    // An offset without a partition: that offset of each partition.
    const both = await dryRun({ offset: '3' });
    expect(both).toMatchObject({ scanned: 2, moved: 2 });
    expect(both.redriven.map((r) => r.key).sort()).toEqual(['p0-3', 'p1-3']);
    expect(await dryRun({ partition: 1, offset: '7' })).toMatchObject({ scanned: 0, moved: 0 });
    expect(await dryRun({ partition: 5 })).toMatchObject({ scanned: 0, moved: 0 });
    // The view of records finds the same one.
    const [record] = await readDlqRecords(ns.kafka, dlq, {
      limit: 10,
      filter: { partition: 0, offset: '17' },
    });
    expect(record).toMatchObject({ partition: 0, offset: '17', key: 'p0-17' });
  });
});

describe('DLQ topics keep no record past the fences of its command', () => {
  const ns = new TestNamespace('dlq-retention');
  afterAll(() => ns.cleanup());

  it('an existing DLQ (Kafka defaults) gets the retention.ms and segment.ms the completion TTL allows at start; its other settings stay', async () => {
    const [source, dlq] = await ns.createTopics(
      { name: 'task.pay', numPartitions: 1 },
      {
        name: 'task.pay.dlq',
        numPartitions: 1,
        configEntries: [{ name: 'cleanup.policy', value: 'delete' }],
      },
    );
    const admin = ns.kafka.admin();
    await admin.connect();
    try {
      const logger = createLogger('align', { level: 'silent' });
      const changed = await alignDlqLimits(admin, [{ source, dlq }], logger, 60_000);
      const want = dlqRetention(60_000);
      expect(changed).toEqual([
        expect.objectContaining({
          dlq,
          settings: expect.objectContaining({
            'retention.ms': String(want.retentionMs),
            'segment.ms': String(want.segmentMs),
          }),
        }),
      ]);
      const { resources } = await admin.describeConfigs({
        includeSynonyms: false,
        resources: [{ type: 2, name: dlq }],
      });
      const value = (name: string) =>
        resources[0].configEntries.find((e) => e.configName === name)?.configValue;
      expect([value('retention.ms'), value('segment.ms'), value('cleanup.policy')]).toEqual([
        String(want.retentionMs),
        String(want.segmentMs),
        'delete',
      ]);
      // Aligned already: nothing more to change.
      expect(await alignDlqLimits(admin, [{ source, dlq }], logger, 60_000)).toEqual([]);
    } finally {
      await admin.disconnect();
    }
  });
});
