import { writeFileSync } from 'node:fs';
import { Kafka, logLevel } from '@keyflow/kafka';
import { EventCodec } from '@keyflow/contracts';
import { taskTopic, Topic, type LogicalTopic } from '@keyflow/schemas';
import { pct } from './support';

/**
 * Where a `three-step` run's time goes, hop by hop, from the timestamps its own records carry (`--hops` of
 * bench:orchestrator; docs/benchmarks/history.md, "Latency, hop by hop"). Every process runs on this machine, so
 * their clocks are one. Per run, in ms:
 *  - `accept`: the client's POST -> StartRun's record timestamp (the API's produce);
 *  - `engine k`: the input that moves the run to step k (StartRun, or step k-1's TaskCompleted), its record timestamp
 *    -> step k's TaskCommand metadata.occurredAt (the engine fetched and applied it);
 *  - `tx start k`: TaskCommand occurredAt -> its record timestamp: the rest of the batch's apply and snapshots, then
 *    the transaction's AddPartitionsToTxn (after its AddOffsetsToTxn, sent once the batch held the partition's
 *    lock, before the apply: commit.ts openBatch), kafkajs stamps a record when it encodes the produce request;
 *  - `commit+worker k`: TaskCommand record timestamp -> TaskCompleted metadata.occurredAt minus its durationMs: the
 *    rest of the engine's transaction (the produce, any TxnOffsetCommit still in flight, EndTxn), the worker's fetch,
 *    its claim in Redis;
 *  - `handler k`: TaskCompleted.durationMs; `result k`: TaskCompleted occurredAt -> its record timestamp (the
 *    worker stored the outcome, then its producer sent it);
 *  - `engine end`: the third TaskCompleted's record timestamp -> RunCompleted occurredAt;
 *  - `total`: the client's POST -> RunCompleted occurredAt (bench:orchestrator's latency).
 * Reads the topics under `prefix` from the start, aborted records included (the first attempt of each is taken),
 * until 3 s pass without a record: call it once every run is complete. With BENCH_HOPS_DUMP=<file>, every complete
 * run's timestamps (`sent`, the client's POST, and the record times above, epoch ms) are also written there as JSON,
 * for splitting a run by time (e.g. leaving out the first seconds, when the services' code is not yet optimised).
 */
export async function hopBreakdown(o: {
  brokers: string[];
  registryUrl: string;
  prefix: string;
  /** The runs to break down: run id -> when the client sent its POST (epoch ms). */
  startedAt: Map<string, number>;
  steps?: string[];
  taskType?: string;
}): Promise<string[]> {
  const steps = o.steps ?? ['first', 'second', 'third'];
  const codec = new EventCodec({ registryUrl: o.registryUrl, topicPrefix: o.prefix });
  const topics: LogicalTopic[] = [
    Topic.WF_REQUESTS,
    taskTopic(o.taskType ?? 'echo'),
    Topic.TASK_RESULTS,
    Topic.WF_EVENTS,
  ];
  await codec.registerTopics(topics);
  const kafka = new Kafka({ brokers: o.brokers, clientId: 'bench-hops', logLevel: logLevel.NOTHING });
  // Per run: timestamps of its records, the first seen of each kind.
  type Times = Record<string, number>;
  const runs = new Map<string, Times>();
  const set = (runId: string, key: string, v: number) => {
    if (!o.startedAt.has(runId)) return;
    const t = runs.get(runId) ?? {};
    if (t[key] === undefined) t[key] = v;
    runs.set(runId, t);
  };
  const consumer = kafka.consumer({
    groupId: `${o.prefix}hops-${Date.now()}`,
    readUncommitted: true,
    maxWaitTimeInMs: 100,
  });
  await consumer.connect();
  await consumer.subscribe({ topics: topics.map((t) => codec.physical(t)), fromBeginning: true });
  let lastAt = Date.now();
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      const at = { topic, partition, offset: message.offset };
      const ts = Number(message.timestamp);
      if (message.value) {
        const d = await codec
          .decode(codec.logical(topic) as LogicalTopic, message.value, at)
          .catch(() => null);
        const v = d?.value as
          | { runId?: string; stepId?: string; durationMs?: number; metadata?: { occurredAt: number } }
          | undefined;
        if (d && v?.runId && v.metadata) {
          const k = steps.indexOf(v.stepId ?? '') + 1;
          if (d.event === 'StartRun') set(v.runId, 'start', ts);
          else if (d.event === 'TaskCommand' && k) {
            set(v.runId, `cmdAt${k}`, v.metadata.occurredAt);
            set(v.runId, `cmd${k}`, ts);
          } else if (d.event === 'TaskCompleted' && k) {
            set(v.runId, `resAt${k}`, v.metadata.occurredAt);
            set(v.runId, `handler${k}`, Number(v.durationMs ?? 0));
            set(v.runId, `res${k}`, ts);
          } else if (d.event === 'RunCompleted') set(v.runId, 'endAt', v.metadata.occurredAt);
        }
      }
      lastAt = Date.now();
    },
  });
  // Read to the end: every run was complete before, so the topics no longer grow; done after 3 s without a record
  // (a partition's end may be a transaction marker, which no consumer is handed).
  // The group's join comes first: 30 s for the first record.
  const t0 = lastAt;
  while (Date.now() - lastAt < (lastAt === t0 ? 30_000 : 3_000)) await new Promise((r) => setTimeout(r, 200));
  await consumer.disconnect();

  const hops: Array<[string, (t: Times, sent: number) => number]> = [['accept', (t, s) => t.start - s]];
  steps.forEach((_, i) => {
    const k = i + 1;
    hops.push(
      [`engine ${k}`, (t) => t[`cmdAt${k}`] - (k === 1 ? t.start : t[`res${k - 1}`])],
      [`tx start ${k}`, (t) => t[`cmd${k}`] - t[`cmdAt${k}`]],
      [`commit+worker ${k}`, (t) => t[`resAt${k}`] - t[`handler${k}`] - t[`cmd${k}`]],
      [`handler ${k}`, (t) => t[`handler${k}`]],
      [`result ${k}`, (t) => t[`res${k}`] - t[`resAt${k}`]],
    );
  });
  hops.push(['engine end', (t) => t.endAt - t[`res${steps.length}`]], ['total', (t, s) => t.endAt - s]);
  const complete = [...runs].filter(([, t]) => Number.isFinite(hops.reduce((a, [, f]) => a + f(t, 0), 0)));
  const dump = process.env.BENCH_HOPS_DUMP;
  if (dump)
    writeFileSync(dump, JSON.stringify(complete.map(([id, t]) => ({ id, sent: o.startedAt.get(id), ...t }))));
  const lines = [`hop by hop, ${complete.length} of ${o.startedAt.size} runs (ms): p50 / p95 / p99`];
  for (const [name, f] of hops) {
    const xs = complete.map(([id, t]) => f(t, o.startedAt.get(id)!));
    lines.push(`  ${name.padEnd(16)} ${pct(xs, 50)} / ${pct(xs, 95)} / ${pct(xs, 99)}`);
  }
  return lines;
}
