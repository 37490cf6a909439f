import { CompressionTypes, type KafkaMessage } from '@keyflow/kafka';
import { SchemaRegistry, SchemaType } from '@kafkajs/confluent-schema-registry';
import { TestNamespace, Collector, testInfra } from '../../src';

// Proves the stack the rest of the project stands on: a real broker, a real registry, a real Redis.
describe('the local stack', () => {
  const ns = new TestNamespace('stack');

  afterAll(() => ns.cleanup());

  it('reports the broker and registry it talks to', async () => {
    const admin = await ns.getAdmin();
    const cluster = await admin.describeCluster();
    const infra = testInfra();
    type Info = { name?: string; version?: string };
    const infoUrl = infra.schemaRegistryUrl.replace(/\/apis\/ccompat\/v7$/, '/apis/registry/v3/system/info');
    const info: Info = await fetch(infoUrl)
      .then(async (r) => (r.ok ? ((await r.json()) as Info) : { version: `unknown (HTTP ${r.status})` }))
      .catch(() => ({ version: 'unknown (not Apicurio?)' }));
    console.log(
      `broker: Apache Kafka ${process.env.KEYFLOW_KAFKA_VERSION ?? '(version unknown: not started by infra/local)'} ` +
        `cluster ${cluster.clusterId}, ${cluster.brokers.length} broker(s) at ${infra.kafkaBrokers.join(',')}; ` +
        `registry: ${info.name ?? 'registry'} ${info.version} at ${infra.schemaRegistryUrl}; source: ${infra.source}`,
    );
    expect(cluster.brokers.length).toBeGreaterThanOrEqual(1);
    expect(cluster.controller).not.toBeNull();
  });

  it('delivers keyed messages in order to a consumer group and commits its offsets', async () => {
    const [topic] = await ns.createTopics({ name: 'orders', numPartitions: 3 });
    const producer = ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const messages = Array.from({ length: 30 }, (_, i) => ({ key: `k${i % 5}`, value: `v${i}` }));
    await producer.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages });
    await producer.disconnect();

    const groupId = ns.groupId('g');
    const consumer = ns.kafka.consumer({ groupId });
    const got = new Collector<{ key: string; value: string; partition: number }>();
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ partition, message }) =>
        got.push({ key: message.key!.toString(), value: message.value!.toString(), partition }),
    });
    const received = await got.wait(30);
    await consumer.disconnect();

    // Per-key order is the order sent.
    for (let k = 0; k < 5; k++) {
      const sent = messages.filter((m) => m.key === `k${k}`).map((m) => m.value);
      expect(received.filter((m) => m.key === `k${k}`).map((m) => m.value)).toEqual(sent);
      expect(new Set(received.filter((m) => m.key === `k${k}`).map((m) => m.partition)).size).toBe(1);
    }
    const offsets = await (await ns.getAdmin()).fetchOffsets({ groupId, topics: [topic] });
    const committed = offsets[0].partitions.reduce((sum, p) => sum + Number(p.offset), 0);
    expect(committed).toBe(30);
  });

  it('commits a transaction with sendOffsets, and hides an aborted one from read_committed readers', async () => {
    const [input, output] = await ns.createTopics(
      { name: 'tx-in', numPartitions: 1 },
      { name: 'tx-out', numPartitions: 1 },
    );
    const seed = ns.kafka.producer();
    await seed.connect();
    await seed.send({
      topic: input,
      messages: [
        { key: 'a', value: 'one' },
        { key: 'a', value: 'two' },
      ],
    });
    await seed.disconnect();

    const groupId = ns.groupId('tx');
    const producer = ns.kafka.producer({
      transactionalId: ns.prefix + '-tx',
      idempotent: true,
      maxInFlightRequests: 1,
    });
    await producer.connect();

    const committedTx = await producer.transaction();
    await committedTx.send({ topic: output, messages: [{ key: 'a', value: 'committed' }] });
    await committedTx.sendOffsets({
      consumerGroupId: groupId,
      topics: [{ topic: input, partitions: [{ partition: 0, offset: '1' }] }],
    });
    await committedTx.commit();

    const abortedTx = await producer.transaction();
    await abortedTx.send({ topic: output, messages: [{ key: 'a', value: 'aborted' }] });
    await abortedTx.sendOffsets({
      consumerGroupId: groupId,
      topics: [{ topic: input, partitions: [{ partition: 0, offset: '2' }] }],
    });
    await abortedTx.abort();

    // A marker after the aborted transaction, so the reader can prove it read past it.
    const after = await producer.transaction();
    await after.send({ topic: output, messages: [{ key: 'a', value: 'after' }] });
    await after.commit();
    await producer.disconnect();

    const offsets = await (await ns.getAdmin()).fetchOffsets({ groupId, topics: [input] });
    expect(offsets[0].partitions[0].offset).toBe('1');

    const reader = ns.kafka.consumer({ groupId: ns.groupId('reader'), readUncommitted: false });
    const seen = new Collector<KafkaMessage>();
    await reader.connect();
    await reader.subscribe({ topic: output, fromBeginning: true });
    await reader.run({ eachMessage: async ({ message }) => seen.push(message) });
    const values = (await seen.wait(2)).map((m) => m.value!.toString());
    await reader.disconnect();
    expect(values).toEqual(['committed', 'after']);
  });

  it('registers a schema and round-trips a record in the Confluent wire format', async () => {
    const registry = new SchemaRegistry({ host: testInfra().schemaRegistryUrl });
    const subject = `${ns.prefix}.smoke-value`;
    // Apicurio answers NONE (not 404) for a subject without a rule; set it explicitly first (infra-notes).
    const put = await fetch(`${testInfra().schemaRegistryUrl}/config/${encodeURIComponent(subject)}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' },
      body: JSON.stringify({ compatibility: 'BACKWARD_TRANSITIVE' }),
    });
    expect(put.status).toBe(200);
    const schema = {
      type: 'record',
      name: 'Smoke',
      namespace: 'dev.keyflow.test',
      fields: [
        { name: 'id', type: 'string' },
        { name: 'n', type: 'long' },
      ],
    };
    const { id } = await registry.register({ type: SchemaType.AVRO, schema: JSON.stringify(schema) }, {
      subject,
      compatibility: 'BACKWARD_TRANSITIVE',
    } as never);
    const bytes = await registry.encode(id, { id: 'x', n: 42 });
    expect(bytes[0]).toBe(0);
    expect(bytes.readInt32BE(1)).toBe(id);
    await expect(registry.decode(bytes)).resolves.toEqual({ id: 'x', n: 42 });
  });

  it('gives one SET NX PX lease to the first caller only, with its expiry set', async () => {
    const redis = ns.redis();
    const key = ns.redisPrefix('lease');
    await expect(redis.set(key, 'owner-1', 'PX', 200, 'NX')).resolves.toBe('OK');
    await expect(redis.set(key, 'owner-2', 'PX', 200, 'NX')).resolves.toBeNull();
    const ttl = await redis.pttl(key);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(200);
  });
});
