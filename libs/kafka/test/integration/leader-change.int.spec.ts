import { Kafka, logLevel, type Admin, type Producer } from 'kafkajs';
import { clusterControl, stackEnvOnPorts, eventually, type ClusterControl } from '@keyflow/testing';
import { createIdempotentProducer } from '../../src';

/**
 * One send whose partitions are led by different brokers, while one of those brokers dies: kafkajs 2.2.4 kept a
 * response per broker across retries, so a partition whose leadership moved to a broker that had already answered
 * for another partition was never sent again, and the send resolved without it (kafkajs issue 1303, PR 1798). In a
 * transaction the rest committed without it: the orchestrator's missing lifecycle events after a broker kill.
 * Here the leader moves by a partition reassignment (deterministic: the old leader answers NOT_LEADER_OR_FOLLOWER)
 * rather than a kill (where the race depends on when the broker dies).
 *
 * On a 3-broker cluster of its own (infra/local/stack.sh; base port KEYFLOW_LEADER_TEST_PORT, default 29200).
 */
jest.setTimeout(240_000);

const BASE = Number(process.env.KEYFLOW_LEADER_TEST_PORT ?? 29200);
const stackEnv = stackEnvOnPorts(BASE, 'leader-test');

let cluster: ClusterControl;
let kafka: Kafka;
let admin: Admin;
const producers: Producer[] = [];

beforeAll(async () => {
  cluster = clusterControl(stackEnv);
  const env = await cluster.up(3);
  kafka = new Kafka({
    clientId: 'leader-change-test',
    brokers: env.KAFKA_BROKERS.split(','),
    logLevel: process.env.KAFKAJS_DEBUG ? logLevel.DEBUG : logLevel.NOTHING,
    retry: { retries: 20, initialRetryTime: 100, maxRetryTime: 2_000 },
  });
  admin = kafka.admin();
  await admin.connect();
});

afterAll(async () => {
  await Promise.allSettled(producers.map((p) => p.disconnect()));
  await admin?.disconnect().catch(() => undefined);
  await cluster?.down({ purge: true });
});

/**
 * A topic whose partition i has replicas `replicas[i]` (the first is its preferred leader), RF 3, min ISR 2.
 * Resolves once every partition has its preferred leader.
 */
async function topicLedBy(name: string, replicas: number[][]): Promise<string> {
  await admin.createTopics({
    waitForLeaders: true,
    topics: [
      {
        topic: name,
        replicaAssignment: replicas.map((r, partition) => ({ partition, replicas: r })),
        configEntries: [{ name: 'min.insync.replicas', value: '2' }],
      },
    ],
  });
  await eventually(`${name} has its preferred leaders`, async () => {
    const md = await admin.fetchTopicMetadata({ topics: [name] });
    return md.topics[0].partitions.every((p) => p.leader === replicas[p.partitionId][0]);
  });
  return name;
}

/** Every value of `topic` a read_committed consumer reads, by partition, once it has read `expected` values. */
async function readBack(topic: string, expected: number): Promise<Record<number, string[]>> {
  const consumer = kafka.consumer({ groupId: `${topic}-reader`, readUncommitted: false });
  const seen: Record<number, string[]> = {};
  let count = 0;
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      (seen[partition] ??= []).push(message.value!.toString());
      count++;
    },
  });
  try {
    await eventually(`${expected} records read back from ${topic}`, () => count >= expected, {
      timeoutMs: 20_000,
    }).catch(() => undefined); // fewer than expected: the assertion below names what is missing
    return seen;
  } finally {
    await consumer.disconnect();
  }
}

/** Warms a producer up: metadata cached and a connection open to the leader of every partition of `topic`. */
async function warmUp(
  producer: Producer,
  topic: string,
  partitions: number,
  transactional = false,
): Promise<void> {
  await producer.connect();
  const messages = Array.from({ length: partitions }, (_, partition) => ({
    partition,
    value: `warm-${partition}`,
  }));
  if (!transactional) {
    await producer.send({ topic, acks: -1, messages });
    return;
  }
  const tx = await producer.transaction();
  await tx.send({ topic, acks: -1, messages });
  await tx.commit();
}

const batchFor = (partitions: number) =>
  Array.from({ length: partitions }, (_, partition) => ({ partition, value: `batch-${partition}` }));

/**
 * Moves partition `partition` of `topic` onto `replicas` (its current leader not among them, so leadership moves
 * at once, as when a leader dies) and resolves once the cluster names the new leader. The producer's cached
 * metadata still names the old one.
 */
async function moveLeader(topic: string, partition: number, replicas: number[]): Promise<void> {
  await admin.alterPartitionReassignments({
    topics: [{ topic, partitionAssignment: [{ partition, replicas }] }],
  });
  await eventually(`${topic}/${partition} led by broker ${replicas[0]}`, async () => {
    const md = await admin.fetchTopicMetadata({ topics: [topic] });
    return md.topics[0].partitions.find((p) => p.partitionId === partition)?.leader === replicas[0];
  });
}

describe("a send across partitions led by different brokers, when one partition's leader moves to the other", () => {
  it('an idempotent producer writes every partition of the batch once', async () => {
    // Broker 1 leads partition 0 and broker 2 partition 1; partition 0 moves to broker 2.
    const topic = await topicLedBy('leader-change-idempotent', [
      [1, 2, 3],
      [2, 3, 1],
    ]);
    const producer = createIdempotentProducer(kafka);
    producers.push(producer);
    await warmUp(producer, topic, 2);
    await moveLeader(topic, 0, [2, 3]);
    const metadata = await producer.send({ topic, acks: -1, messages: batchFor(2) });
    expect(metadata.map((m) => m.partition).sort()).toEqual([0, 1]);
    const seen = await readBack(topic, 4);
    expect(seen).toEqual({ 0: ['warm-0', 'batch-0'], 1: ['warm-1', 'batch-1'] });
  });

  it('a transaction commits every partition of the batch, or none', async () => {
    // Broker 3 leads partition 0 and broker 2 partition 1; partition 0 moves to broker 2.
    const topic = await topicLedBy('leader-change-transactional', [
      [3, 2, 1],
      [2, 3, 1],
    ]);
    const producer = createIdempotentProducer(kafka, 'leader-change-tx');
    producers.push(producer);
    await producer.connect();
    const tx = await producer.transaction();
    try {
      // Both partitions join the transaction (and the producer learns their leaders) before the move, as in the
      // engine's transactions that send in several requests.
      await tx.send({
        topic,
        acks: -1,
        messages: batchFor(2).map((m) => ({ ...m, value: `pre-${m.partition}` })),
      });
      await moveLeader(topic, 0, [2, 1]);
      await tx.sendBatch({ acks: -1, topicMessages: [{ topic, messages: batchFor(2) }] });
      await tx.commit();
    } catch (err) {
      await tx.abort().catch(() => undefined);
      throw err; // kafkajs retries on fresh metadata: this send must succeed
    }
    const seen = await readBack(topic, 4);
    expect(seen).toEqual({ 0: ['pre-0', 'batch-0'], 1: ['pre-1', 'batch-1'] });
  });
});

/** The partition of __transaction_state whose leader coordinates `transactionalId`: Java's String.hashCode, abs, mod. */
function transactionStatePartition(transactionalId: string, partitions: number): number {
  let h = 0;
  for (let i = 0; i < transactionalId.length; i++) h = (Math.imul(31, h) + transactionalId.charCodeAt(i)) | 0;
  return (h === -2147483648 ? 0 : Math.abs(h)) % partitions;
}

describe("a transactional producer's coordinators (kafkajs patch: coordinators kept)", () => {
  it('are looked up once, not per request, and found again when the transaction coordinator moves', async () => {
    const topic = await topicLedBy('coordinator-move', [[1, 2, 3]]);
    const transactionalId = 'coordinator-move-tx';
    const producer = createIdempotentProducer(kafka, transactionalId);
    producers.push(producer);
    const lookups: string[] = [];
    producer.on(producer.events.REQUEST, (e) => {
      if (e.payload.apiName === 'GroupCoordinator') lookups.push(e.payload.broker);
    });
    await producer.connect();
    // The group's coordinator answers (a new cluster creates __consumer_offsets on the first lookup).
    await eventually('the group coordinator answers', () =>
      admin.fetchOffsets({ groupId: 'coordinator-move-group', topics: [topic] }).then(
        () => true,
        () => false,
      ),
    );
    const transaction = async (value: string) => {
      const tx = await producer.transaction();
      try {
        await tx.send({ topic, acks: -1, messages: [{ value }] });
        await tx.sendOffsets({
          consumerGroupId: 'coordinator-move-group',
          topics: [{ topic, partitions: [{ partition: 0, offset: '1' }] }],
        });
        await tx.commit();
      } catch (err) {
        await tx.abort().catch(() => undefined);
        throw err;
      }
    };
    await transaction('tx-0'); // finds both coordinators
    const afterFirst = lookups.length;
    for (let i = 1; i <= 5; i++) await transaction(`tx-${i}`);
    expect(lookups.length - afterFirst).toBe(0); // unpatched: 4 per transaction

    // The transaction coordinator's partition of __transaction_state moves off its leader.
    const md = await admin.fetchTopicMetadata({ topics: ['__transaction_state'] });
    const partitions = md.topics[0].partitions;
    const p = partitions.find(
      (x) => x.partitionId === transactionStatePartition(transactionalId, partitions.length),
    )!;
    await moveLeader(
      '__transaction_state',
      p.partitionId,
      p.replicas.filter((r) => r !== p.leader),
    );
    const beforeMove = lookups.length;
    await transaction('tx-after-move');
    expect(lookups.length).toBeGreaterThan(beforeMove); // the moved coordinator was found again
    const seen = await readBack(topic, 7);
    expect(seen[0]).toEqual(['tx-0', 'tx-1', 'tx-2', 'tx-3', 'tx-4', 'tx-5', 'tx-after-move']);
  });
});
