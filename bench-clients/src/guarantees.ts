import { Kafka, logLevel, type Admin } from 'kafkajs';
import { createIdempotentProducer } from '@keyflow/kafka';
import { clusterControl, stackEnvOnPorts, eventually } from '@keyflow/testing';

/**
 * The guarantee tests of libs/kafka that keyflow's kafkajs patch exists for, ported to each client (issue 40,
 * docs/adr/0001-kafka-client.md), run one after the other on the same brokers:
 *   - test/integration/aborted-transactions.int.spec.ts (both cases), on the local stack (KAFKA_BROKERS);
 *   - test/integration/producer-health.int.spec.ts, its partial-refusal case (sequence numbers), on the local stack;
 *   - test/integration/leader-change.int.spec.ts (both cases), on a 3-broker cluster of its own started with
 *     infra/local/stack.sh (base port KEYFLOW_CLIENTS_LEADER_PORT, default 29300; stopped and purged at the end).
 * The cluster is driven with a kafkajs admin (topics with replica assignments, reassignments, metadata): that is
 * the test's harness; only the producer and the read_committed consumer are the client under test.
 * Prints one line per client and case (PASS/FAIL, and what was read when it fails); exits 1 if any failed.
 * Run: npm run bench:clients -- --guarantees [--only kafkajs,platformatic,confluent] [--skip-cluster]
 */

type Value = { partition: number; value: string };
type Out = { partition?: number; key?: Buffer | string; value: string };

interface TxLike {
  send(topic: string, messages: Out[]): Promise<void>;
  commit(): Promise<void>;
  abort(): Promise<void>;
}
interface ProducerLike {
  /** acks=all; resolves with the partitions the client reports as written. */
  send(topic: string, messages: Out[]): Promise<number[]>;
  begin(): Promise<TxLike>;
  close(): Promise<void>;
}
interface GuaranteeClient {
  name: string;
  producer(brokers: string[], transactionalId?: string): Promise<ProducerLike>;
  /** What a read_committed consumer of a fresh group reads from `topic` until `enough` holds or `timeoutMs`. */
  readCommitted(
    brokers: string[],
    topic: string,
    group: string,
    enough: (v: Value[]) => boolean,
  ): Promise<Value[]>;
}

const READ_TIMEOUT_MS = 20_000;

/** Resolves when `enough(seen)` holds, or after READ_TIMEOUT_MS (the assertion then names what is missing). */
const settle = (seen: Value[], enough: (v: Value[]) => boolean) =>
  eventually('records read back', () => enough(seen), { timeoutMs: READ_TIMEOUT_MS }).catch(() => undefined);

function kafkajsGuarantees(): GuaranteeClient {
  const kafkaOf = (brokers: string[]) =>
    new Kafka({
      brokers,
      clientId: 'guarantees-kafkajs',
      logLevel: logLevel.NOTHING,
      retry: { retries: 20, initialRetryTime: 100, maxRetryTime: 2_000 },
    });
  return {
    name: 'kafkajs 2.2.4 + keyflow patch',
    async producer(brokers, transactionalId) {
      const p = createIdempotentProducer(kafkaOf(brokers), transactionalId);
      await p.connect();
      return {
        async send(topic, messages) {
          const md = await p.send({ topic, acks: -1, messages: messages });
          return md.map((m) => m.partition);
        },
        async begin() {
          const tx = await p.transaction();
          return {
            send: async (topic, messages) => void (await tx.send({ topic, acks: -1, messages })),
            commit: () => tx.commit(),
            abort: () => tx.abort(),
          };
        },
        close: () => p.disconnect(),
      };
    },
    async readCommitted(brokers, topic, group, enough) {
      const c = kafkaOf(brokers).consumer({ groupId: group, readUncommitted: false });
      const seen: Value[] = [];
      await c.connect();
      await c.subscribe({ topic, fromBeginning: true });
      await c.run({
        eachMessage: async ({ partition, message }) =>
          void seen.push({ partition, value: String(message.value) }),
      });
      await settle(seen, enough);
      await c.disconnect();
      return seen;
    },
  };
}

function platformaticGuarantees(): GuaranteeClient {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const pk = require('@platformatic/kafka') as typeof import('@platformatic/kafka');
  const base = (brokers: string[]) => ({
    clientId: 'guarantees-platformatic',
    bootstrapBrokers: brokers,
    retries: 20,
    retryDelay: 250,
  });
  const toMsg = (topic: string, m: Out) => ({
    topic,
    ...(m.partition === undefined ? {} : { partition: m.partition }),
    ...(m.key === undefined ? {} : { key: Buffer.from(m.key) }),
    value: Buffer.from(m.value),
  });
  return {
    name: '@platformatic/kafka',
    async producer(brokers, transactionalId) {
      const p = new pk.Producer({
        ...base(brokers),
        idempotent: true,
        acks: pk.ProduceAcks.ALL,
        partitioner: pk.compatibilityPartitioner,
        ...(transactionalId ? { transactionalId } : {}),
      });
      return {
        async send(topic, messages) {
          const r = await p.send({ messages: messages.map((m) => toMsg(topic, m)) });
          return (r.offsets ?? []).map((o) => o.partition);
        },
        async begin() {
          const tx = await p.beginTransaction();
          return {
            send: async (topic, messages) =>
              void (await tx.send({ messages: messages.map((m) => toMsg(topic, m)) })),
            commit: () => tx.commit(),
            abort: () => tx.abort(),
          };
        },
        close: () => p.close(),
      };
    },
    async readCommitted(brokers, topic, group, enough) {
      const c = new pk.Consumer({
        ...base(brokers),
        groupId: group,
        isolationLevel: pk.FetchIsolationLevels.READ_COMMITTED,
        maxWaitTime: 500,
      });
      const seen: Value[] = [];
      const s = await c.consume({
        topics: [topic],
        mode: pk.MessagesStreamModes.EARLIEST,
        fallbackMode: pk.MessagesStreamFallbackModes.EARLIEST,
      });
      s.on('data', (m: { partition: number; value: Buffer }) =>
        seen.push({ partition: m.partition, value: m.value.toString() }),
      );
      await settle(seen, enough);
      await c.close(true);
      return seen;
    },
  };
}

function confluentGuarantees(): GuaranteeClient {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const ck = require('@confluentinc/kafka-javascript') as typeof import('@confluentinc/kafka-javascript');
  const { KafkaJS } = ck;
  const kafkaOf = (brokers: string[]) =>
    new KafkaJS.Kafka({
      kafkaJS: { brokers, clientId: 'guarantees-confluent', logLevel: KafkaJS.logLevel.NOTHING },
    });
  return {
    name: '@confluentinc/kafka-javascript',
    async producer(brokers, transactionalId) {
      const p = kafkaOf(brokers).producer({
        kafkaJS: { acks: -1, idempotent: true, ...(transactionalId ? { transactionalId } : {}) },
        partitioner: 'murmur2_random',
      });
      await p.connect();
      return {
        async send(topic, messages) {
          const md = await p.send({ topic, messages });
          return md.map((m) => m.partition);
        },
        async begin() {
          const tx = await p.transaction();
          return {
            send: async (topic, messages) => void (await tx.send({ topic, messages })),
            commit: () => tx.commit(),
            abort: () => tx.abort(),
          };
        },
        close: () => p.disconnect(),
      };
    },
    async readCommitted(brokers, topic, group, enough) {
      const c = kafkaOf(brokers).consumer({
        kafkaJS: { groupId: group, fromBeginning: true, readUncommitted: false },
      });
      const seen: Value[] = [];
      await c.connect();
      await c.subscribe({ topic });
      await c.run({
        eachMessage: async ({ partition, message }) =>
          void seen.push({ partition, value: String(message.value) }),
      });
      await settle(seen, enough);
      await c.disconnect();
      return seen;
    },
  };
}

const results: { client: string; test: string; ok: boolean; detail: string }[] = [];
/** The step a check is at, named in its failure: the harness's (topic, reassignment) or the client's. */
let step = '';
async function check(client: string, test: string, body: () => Promise<string | undefined>): Promise<void> {
  let detail: string | undefined;
  step = 'start';
  try {
    detail = await body();
  } catch (e) {
    detail = `threw at ${step}: ${(e as Error).name}: ${(e as Error).message}`;
  }
  results.push({ client, test, ok: detail === undefined, detail: detail ?? '' });
  console.log(
    `${detail === undefined ? 'PASS' : 'FAIL'}  ${client}  ${test}${detail ? `  (${detail})` : ''}`,
  );
}

const eq = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
const byPartition = (vs: Value[]) => {
  const r: Record<number, string[]> = {};
  for (const v of vs) (r[v.partition] ??= []).push(v.value);
  return r;
};

/** aborted-transactions.int.spec.ts, both cases. */
async function abortedTransactions(
  c: GuaranteeClient,
  key: string,
  admin: Admin,
  brokers: string[],
  run: string,
) {
  const t = (name: string) => `${run}.${key}.${name}`;
  const only = (v: Value[]) => v.map((x) => x.value);
  await check(
    c.name,
    'read_committed never sees a record of an aborted transaction, when transactions of two producers interleave',
    async () => {
      const topic = t('interleaved');
      step = 'harness: create the topic';
      await admin.createTopics({ waitForLeaders: true, topics: [{ topic, numPartitions: 1 }] });
      step = 'client: the transactions';
      const a = await c.producer(brokers, t('tx-a'));
      const b = await c.producer(brokers, t('tx-b'));
      try {
        const ta = await a.begin();
        await ta.send(topic, [{ key: 'k', value: 'aborted-a-1' }]);
        const tb = await b.begin();
        await tb.send(topic, [{ key: 'k', value: 'aborted-b' }]);
        await ta.send(topic, [{ key: 'k', value: 'aborted-a-2' }]);
        await tb.abort();
        await ta.abort();
        const tc = await b.begin();
        await tc.send(topic, [{ key: 'k', value: 'committed' }]);
        await tc.commit();
      } finally {
        await Promise.allSettled([a.close(), b.close()]);
      }
      const seen = only(
        await c.readCommitted(brokers, topic, t('reader'), (v) => only(v).includes('committed')),
      );
      return eq(seen, ['committed']) ? undefined : `read ${JSON.stringify(seen)}`;
    },
  );
  await check(
    c.name,
    "read_committed never takes a data record whose key looks like an abort marker's for the end of an aborted transaction",
    async () => {
      const topic = t('marker-key');
      step = 'harness: create the topic';
      await admin.createTopics({ waitForLeaders: true, topics: [{ topic, numPartitions: 1 }] });
      step = 'client: the transactions';
      const p = await c.producer(brokers, t('tx-marker-key'));
      try {
        const tx = await p.begin();
        await tx.send(topic, [{ key: Buffer.alloc(4), value: 'aborted-zero-key' }]);
        await tx.send(topic, [{ key: 'k', value: 'aborted-after' }]);
        await tx.abort();
        const tc = await p.begin();
        await tc.send(topic, [{ key: 'k', value: 'committed' }]);
        await tc.commit();
      } finally {
        await p.close();
      }
      const seen = only(
        await c.readCommitted(brokers, topic, t('marker-reader'), (v) => only(v).includes('committed')),
      );
      return eq(seen, ['committed']) ? undefined : `read ${JSON.stringify(seen)}`;
    },
  );
}

/** producer-health.int.spec.ts, the partial-refusal case (the patch's sequence-number fix), on the local stack. */
async function partialRefusal(c: GuaranteeClient, key: string, admin: Admin, brokers: string[], run: string) {
  await check(
    c.name,
    'a request refused for one partition (too large) loses nothing the broker wrote for another, nor what follows there',
    async () => {
      // One broker: every partition has the same leader, so one request carries both partitions.
      step = 'harness: create the topic';
      const topic = `${run}.${key}.mixed`;
      await admin.createTopics({
        waitForLeaders: true,
        topics: [{ topic, numPartitions: 4, configEntries: [{ name: 'max.message.bytes', value: '1024' }] }],
      });
      const [refused, written] = [0, 1];
      const p = await c.producer(brokers);
      try {
        step = 'client: the send refused for one partition';
        const err = await p
          .send(topic, [
            { partition: refused, value: 'x'.repeat(4096) },
            { partition: written, value: 'first' },
          ])
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        if (err === undefined) return 'the send with a record over max.message.bytes resolved';
        step = 'client: the next send to the written partition';
        await p.send(topic, [{ partition: written, value: 'second' }]);
      } finally {
        await p.close();
      }
      step = 'harness: high watermarks';
      const high = Object.fromEntries(
        (await admin.fetchTopicOffsets(topic)).map((o) => [o.partition, o.high]),
      );
      const got = { refused: high[refused], written: high[written] };
      return eq(got, { refused: '0', written: '2' }) ? undefined : `high watermarks ${JSON.stringify(got)}`;
    },
  );
}

/** leader-change.int.spec.ts, both cases, on the 3-broker cluster behind `admin`. */
async function leaderChange(c: GuaranteeClient, key: string, admin: Admin, brokers: string[], run: string) {
  const topicLedBy = async (name: string, replicas: number[][]) => {
    step = 'harness: create the topic';
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
  };
  const moveLeader = async (topic: string, partition: number, replicas: number[]) => {
    step = 'harness: move the leader';
    await admin.alterPartitionReassignments({
      topics: [{ topic, partitionAssignment: [{ partition, replicas }] }],
    });
    await eventually(`${topic}/${partition} led by broker ${replicas[0]}`, async () => {
      const md = await admin.fetchTopicMetadata({ topics: [topic] });
      return md.topics[0].partitions.find((p) => p.partitionId === partition)?.leader === replicas[0];
    });
  };
  const batchFor = (prefix: string) =>
    [0, 1].map((partition) => ({ partition, value: `${prefix}-${partition}` }));
  const readBack = (topic: string) =>
    c.readCommitted(brokers, topic, `${topic}-reader`, (v) => v.length >= 4);
  const expectTwoPerPartition = async (topic: string, first: string) => {
    step = 'client: read back';
    const seen = byPartition(await readBack(topic));
    const want = { 0: [`${first}-0`, 'batch-0'], 1: [`${first}-1`, 'batch-1'] };
    return eq(seen, want) ? undefined : `read ${JSON.stringify(seen)}`;
  };

  await check(
    c.name,
    'leader change: an idempotent producer writes every partition of the batch once',
    async () => {
      const topic = await topicLedBy(`${run}.${key}.leader-change-idempotent`, [
        [1, 2, 3],
        [2, 3, 1],
      ]);
      const p = await c.producer(brokers);
      try {
        step = 'client: warm-up send';
        await p.send(topic, batchFor('warm'));
        await moveLeader(topic, 0, [2, 3]);
        step = 'client: send after the move';
        const written = await p.send(topic, batchFor('batch'));
        if (!eq([...written].sort(), [0, 1])) return `send reported partitions ${JSON.stringify(written)}`;
      } finally {
        await p.close();
      }
      return expectTwoPerPartition(topic, 'warm');
    },
  );
  await check(
    c.name,
    'leader change: a transaction commits every partition of the batch, or none',
    async () => {
      const topic = await topicLedBy(`${run}.${key}.leader-change-transactional`, [
        [3, 2, 1],
        [2, 3, 1],
      ]);
      const p = await c.producer(brokers, `${run}.${key}.leader-change-tx`);
      try {
        const tx = await p.begin();
        try {
          step = 'client: first send in the transaction';
          await tx.send(topic, batchFor('pre'));
          await moveLeader(topic, 0, [2, 1]);
          step = 'client: send after the move, commit';
          await tx.send(topic, batchFor('batch'));
          await tx.commit();
        } catch (e) {
          await tx.abort().catch(() => undefined);
          throw e;
        }
      } finally {
        await p.close();
      }
      return expectTwoPerPartition(topic, 'pre');
    },
  );
}

async function main() {
  const args = process.argv.slice(2);
  const onlyAt = args.indexOf('--only');
  const want = onlyAt >= 0 ? args[onlyAt + 1].split(',') : ['kafkajs', 'platformatic', 'confluent'];
  const loaders: Record<string, () => GuaranteeClient> = {
    kafkajs: kafkajsGuarantees,
    platformatic: platformaticGuarantees,
    confluent: confluentGuarantees,
  };
  const clients: [string, GuaranteeClient][] = [];
  for (const key of want) {
    try {
      clients.push([key, loaders[key]()]);
    } catch (e) {
      console.log(`not checked: ${key}: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  const run = `guarantees-${Date.now().toString(36)}`;

  const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
  const admin = new Kafka({
    brokers,
    clientId: 'guarantees-admin',
    logLevel: logLevel.NOTHING,
    retry: { retries: 20, initialRetryTime: 100, maxRetryTime: 2_000 },
  }).admin();
  await admin.connect();
  for (const [key, c] of clients) await abortedTransactions(c, key, admin, brokers, run);
  for (const [key, c] of clients) await partialRefusal(c, key, admin, brokers, run);
  const created = (await admin.listTopics()).filter((t) => t.startsWith(`${run}.`));
  if (created.length) await admin.deleteTopics({ topics: created });
  await admin.disconnect();

  if (!args.includes('--skip-cluster')) {
    const cluster = clusterControl(
      stackEnvOnPorts(Number(process.env.KEYFLOW_CLIENTS_LEADER_PORT ?? 29300), 'clients-leader'),
    );
    try {
      const env = await cluster.up(3);
      const cb = env.KAFKA_BROKERS.split(',');
      const cadmin = new Kafka({
        brokers: cb,
        clientId: 'guarantees-admin',
        logLevel: logLevel.NOTHING,
        // as leader-change.int.spec.ts: a cluster just started answers UNKNOWN_TOPIC_OR_PARTITION for a while
        retry: { retries: 20, initialRetryTime: 100, maxRetryTime: 2_000 },
      }).admin();
      await cadmin.connect();
      for (const [key, c] of clients) await leaderChange(c, key, cadmin, cb, run);
      await cadmin.disconnect();
    } finally {
      await cluster.down({ purge: true });
    }
  }
  const failed = results.filter((r) => !r.ok).length;
  console.log(`\n${results.length - failed} passed, ${failed} failed`);
  return failed;
}

main().then(
  (failed) => process.exit(failed ? 1 : 0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
