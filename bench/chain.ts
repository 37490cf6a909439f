import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Kafka, logLevel, type Consumer, type Producer } from 'kafkajs';
import { TRANSACTIONAL_RETRY } from '@keyflow/kafka';
import { httpClient, pct, benchWait } from './support';
import { eventually } from '@keyflow/testing';

/**
 * The latency baseline of issue 12 target 6: what a hand-written kafkajs pipeline with the shape of one three-step
 * run costs, measured on the same stack in the same run as the engine. An HTTP accept (one idempotent acks=all
 * produce, then 202), then seven produce-consume hops, as a run takes them:
 *   request -> [tx] -> cmd1 -> [plain] -> res1 -> [tx] -> cmd2 -> [plain] -> res2 -> [tx] -> cmd3 -> [plain] -> res3
 *   -> [tx] -> done
 * where [tx] is a consume-transform-produce hop in a Kafka transaction (the engine's four: sendBatch, sendOffsets,
 * commit per batch; consumers read_committed) and [plain] a worker-like hop (acks=all idempotent produce, then the
 * offset commit). Every hop is its own consumer group in this process, with the settings that gave the chain its
 * lowest latency here (fetch long-poll: minBytes 1, so a fetch answers as soon as a record is there; maxWaitTimeInMs
 * only bounds an idle poll). Latency: from before the HTTP request to the `done` record being read (read_committed).
 */
export async function chainLatency(o: {
  brokers: string[];
  prefix: string;
  /** Offered load, runs per second. */
  rate: number;
  seconds: number;
  partitions?: number;
}): Promise<{ p50: number; p95: number; p99: number; n: number }> {
  const kafka = new Kafka({ brokers: o.brokers, clientId: 'bench-chain', logLevel: logLevel.NOTHING });
  const partitions = o.partitions ?? 6;
  const topics = ['request', 'cmd1', 'res1', 'cmd2', 'res2', 'cmd3', 'res3', 'done'].map(
    (t) => `${o.prefix}chain.${t}`,
  );
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({
    waitForLeaders: true,
    topics: topics.map((topic) => ({ topic, numPartitions: partitions })),
  });
  await admin.disconnect();

  const consumers: Consumer[] = [];
  const producers: Producer[] = [];
  const consumer = async (group: string, topic: string) => {
    const c = kafka.consumer({
      groupId: `${o.prefix}chain.${group}`,
      readUncommitted: false,
      minBytes: 1,
      maxWaitTimeInMs: 100,
      sessionTimeout: 10_000,
      heartbeatInterval: 1_000,
    });
    consumers.push(c);
    await c.connect();
    await c.subscribe({ topic, fromBeginning: true });
    return c;
  };

  // The four engine hops: one transactional producer per hop (the engine has one per partition: same commit cost).
  const txHop = async (i: number, from: string, to: string) => {
    const p = kafka.producer({
      transactionalId: `${o.prefix}chain.tx${i}`,
      idempotent: true,
      maxInFlightRequests: 1,
      retry: TRANSACTIONAL_RETRY, // the engine's: a short wait when a transaction follows a commit too closely
    });
    producers.push(p);
    await p.connect();
    const c = await consumer(`tx${i}`, from);
    await c.run({
      autoCommit: false,
      eachBatch: async ({ batch, resolveOffset }) => {
        if (!batch.messages.length) return;
        const tx = await p.transaction();
        try {
          await tx.send({
            topic: to,
            acks: -1,
            messages: batch.messages.map((m) => ({ key: m.key, value: m.value })),
          });
          const last = batch.messages[batch.messages.length - 1].offset;
          await tx.sendOffsets({
            consumerGroupId: `${o.prefix}chain.tx${i}`,
            topics: [
              {
                topic: batch.topic,
                partitions: [{ partition: batch.partition, offset: String(BigInt(last) + 1n) }],
              },
            ],
          });
          await tx.commit();
          resolveOffset(last);
        } catch (e) {
          await tx.abort().catch(() => undefined);
          throw e;
        }
      },
    });
  };
  // The three worker hops: acks=all idempotent produce per batch, then the offset commit.
  const plainHop = async (i: number, from: string, to: string) => {
    const p = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    producers.push(p);
    await p.connect();
    const c = await consumer(`plain${i}`, from);
    await c.run({
      autoCommit: false,
      eachBatch: async ({ batch, resolveOffset, commitOffsetsIfNecessary }) => {
        if (!batch.messages.length) return;
        await p.send({
          topic: to,
          acks: -1,
          messages: batch.messages.map((m) => ({ key: m.key, value: m.value })),
        });
        resolveOffset(batch.messages[batch.messages.length - 1].offset);
        await commitOffsetsIfNecessary();
      },
    });
  };
  const [request, cmd1, res1, cmd2, res2, cmd3, res3, done] = topics;
  await txHop(1, request, cmd1);
  await plainHop(1, cmd1, res1);
  await txHop(2, res1, cmd2);
  await plainHop(2, cmd2, res2);
  await txHop(3, res2, cmd3);
  await plainHop(3, cmd3, res3);
  await txHop(4, res3, done);

  const finishedAt = new Map<string, number>();
  const sink = await consumer('sink', done);
  // As bench:orchestrator's reader of RunCompleted: a fresh group, no offset commits.
  await sink.run({
    autoCommit: false,
    eachMessage: async ({ message }) => void finishedAt.set(message.key!.toString(), Date.now()),
  });

  // The HTTP accept: one acks=all produce per request, then 202 (as POST /runs answers once StartRun is durable).
  const accept = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  producers.push(accept);
  await accept.connect();
  const server: Server = createServer((req, res) => {
    const id = req.url!.slice(1);
    accept
      .send({ topic: request, acks: -1, messages: [{ key: id, value: Buffer.from(id) }] })
      .then(() => res.writeHead(202).end())
      .catch(() => res.writeHead(503).end());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  // Warm-up: one run through every hop (group joins, producer ids, first transactions) before measuring.
  const http = httpClient(base);
  await http.post('/warmup');
  await eventually('chain warm-up', () => finishedAt.has('warmup'), benchWait(120_000, 'chain warm-up'));

  const startedAt = new Map<string, number>();
  const t0 = Date.now();
  const total = o.rate * o.seconds;
  for (let i = 0; i < total; i++) {
    const due = t0 + (i * 1000) / o.rate;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const id = `r${i}`;
    startedAt.set(id, Date.now());
    void http.post(`/${id}`);
  }
  await eventually(
    'chain runs',
    () => [...startedAt.keys()].every((id) => finishedAt.has(id)),
    benchWait(120_000, 'chain runs'),
  );
  const lat = [...startedAt].map(([id, t]) => finishedAt.get(id)! - t);
  await http.close();
  server.close();
  await Promise.all(consumers.map((c) => c.disconnect()));
  await Promise.all(producers.map((p) => p.disconnect()));
  return { p50: pct(lat, 50), p95: pct(lat, 95), p99: pct(lat, 99), n: lat.length };
}
