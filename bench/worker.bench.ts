import { Command } from 'commander';
import { Kafka, logLevel, type Batch, type Producer } from 'kafkajs';
import { derivedEventId, EventCodec, newMetadata } from '@keyflow/contracts';
import type { TaskCommand, TaskCompleted } from '@keyflow/schemas';
import { taskTopic, Topic } from '@keyflow/schemas';
import { idempotencyKeyOf } from '@keyflow/workflow';
import { noop } from '@keyflow/testing';
import { BatchingProducer, createIdempotentProducer, createKafka, OrderedConsumer } from '@keyflow/kafka';
import { dlqTopicFor } from '@keyflow/ops';
import { createLogger } from '@keyflow/observability';
import { loadWorkerConfig } from '@keyflow/workers';

/** The bench's task topic (logical): the no-op task's. */
const NOOP_TOPIC = taskTopic(noop.type);
import { createRedis, describeRedis, IdempotencyStore, redisConnectionFromEnv } from '@keyflow/idempotency';
import {
  assertRunning,
  closeSink,
  cpuShares,
  formatShares,
  otlpSink,
  pct,
  serviceOnlyEnv,
  spawnService,
  tracingLine,
  benchWait,
  benchTopics,
  readResults,
  runBench,
} from './support';
import { eventually, freePort, metricValue } from '@keyflow/testing';

/**
 * Worker benchmark. Prints, from one run on the local stack:
 *  - tasks/s through a worker process with the no-op handler, draining a backlog, next to the baseline of the same
 *    run: a batched kafkajs consume-produce relay over the same messages (acks=all both; see batchedRelay);
 *  - p50/p95 command-to-result latency (ms) at a steady offered rate;
 *  - the worker's peak RSS (VmHWM) while draining a large backlog.
 *   eval "$(infra/local/stack.sh up)" && npm run bench:worker -- --tasks 20000 --backlog 200000
 */
const program = new Command()
  .option('--tasks <n>', 'backlog drained for the throughput figures', '20000')
  .option('--rate <n>', 'offered tasks/s for the latency figures', '500')
  .option('--seconds <n>', 'duration of the latency run', '10')
  .option('--backlog <n>', 'backlog size for the peak-memory figure (0 to skip)', '200000')
  .option('--partitions <n>', 'partitions of the task and result topics', '6')
  .option(
    '--otlp',
    'tracing on: the worker exports its spans over OTLP/HTTP to a sink this bench runs (they are counted, not kept)',
  )
  .option(
    '--profile <dir>',
    'write a V8 CPU profile (.cpuprofile) of the worker of the throughput run into <dir>',
  )
  .parse();
const opts = program.opts<{
  tasks: string;
  rate: string;
  seconds: string;
  backlog: string;
  partitions: string;
  otlp?: boolean;
  profile?: string;
}>();

const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
const registryUrl = process.env.SCHEMA_REGISTRY_URL ?? '';
if (!brokers.length || !registryUrl || !process.env.REDIS_URL)
  throw new Error(
    'KAFKA_BROKERS, SCHEMA_REGISTRY_URL and REDIS_URL must be set: eval "$(infra/local/stack.sh up)"',
  );
const kafka = new Kafka({ brokers, clientId: 'bench', logLevel: logLevel.NOTHING });

async function setup(prefix: string, partitions: number) {
  const codec = new EventCodec({ registryUrl, topicPrefix: prefix });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({
    waitForLeaders: true,
    topics: [
      NOOP_TOPIC,
      dlqTopicFor(NOOP_TOPIC),
      Topic.TASK_RESULTS,
      'task.results.ceiling',
      'relay.out',
    ].map((t) => ({
      topic: `${prefix}${t}`,
      numPartitions: t.endsWith('dlq') ? 1 : partitions,
    })),
  });
  await admin.disconnect();
  await codec.registerTopics([Topic.TASK_RESULTS, NOOP_TOPIC]);
  return codec;
}

function command(i: number): TaskCommand {
  const runId = `run-${i}`;
  return {
    metadata: newMetadata('TaskCommand', { key: `entity-${i % 5000}`, correlationId: runId }),
    runId,
    workflow: 'bench',
    workflowVersion: 1,
    stepId: noop.type,
    taskType: noop.type,
    attempt: 1,
    idempotencyKey: idempotencyKeyOf(runId, noop.type),
    input: '{}',
    inputRef: null,
    compensates: null,
    timeoutMs: 30_000,
    maxAttempts: 1,
  };
}

async function produce(producer: Producer, codec: EventCodec, from: number, n: number) {
  for (let i = from; i < from + n; i += 1000) {
    const batch = Array.from({ length: Math.min(1000, from + n - i) }, (_, j) => command(i + j));
    await producer.send({
      topic: codec.physical(NOOP_TOPIC),
      acks: -1,
      messages: batch.map((c) => ({
        key: c.metadata.key,
        value: codec.encode(NOOP_TOPIC, 'TaskCommand', c),
      })),
    });
  }
}

/** With --otlp: where the worker exports its spans (set in main before any worker starts). */
let otlpEndpoint: string | undefined;

/**
 * A worker process on the bench's topics, its HTTP server on `port` (its ready line is not logged at LOG_LEVEL
 * warn).
 */
function startWorker(prefix: string, profileDir?: string, port = 0) {
  const worker = spawnService(
    'examples/test-workloads/src/worker.ts',
    {
      KEYFLOW_TOPIC_PREFIX: prefix,
      WORKER_GROUP_ID: `${prefix}workers`,
      WORKER_TASK_TYPES: noop.type,
      WORKER_HTTP_PORT: String(port),
      LOG_LEVEL: 'warn',
      ...(otlpEndpoint ? { OTEL_EXPORTER_OTLP_ENDPOINT: otlpEndpoint } : {}),
      ...serviceOnlyEnv('WORKER'),
    },
    'worker ready',
    // Node writes the profile when the process exits (the bench stops it with SIGTERM).
    profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [],
  );
  return { ...worker, port };
}

/** How many waves the worker at `url` leased, and their mean size in tasks (from its /metrics). */
async function waveSizes(url: string): Promise<{ count: number; mean: number }> {
  const count = await metricValue(url, 'keyflow_worker_wave_tasks_count');
  const sum = await metricValue(url, 'keyflow_worker_wave_tasks_sum');
  return { count, mean: count > 0 ? sum / count : 0 };
}

/** Counts results on task.results; records command-to-result latency (result record time - command sent). */
async function resultCounter(codec: EventCodec, group: string) {
  let count = 0;
  let firstAt = 0;
  const latencies: number[] = [];
  const sentAt = new Map<string, number>();
  const consumer = await readResults(kafka, codec, group, (d, at) => {
    if (count++ === 0) firstAt = Date.now();
    const sent = sentAt.get((d.value as { runId: string }).runId);
    if (sent !== undefined) latencies.push(Number(at.timestamp) - sent);
  });
  return {
    consumer,
    get count() {
      return count;
    },
    get firstAt() {
      return firstAt;
    },
    latencies,
    sentAt,
  };
}

/**
 * Starts polling the end offsets of `topic` (physical) every 50 ms; resolves, once it holds `n` records, with the
 * seconds from the first record seen to the n-th (each seen within 50 ms). `onFirst` runs when the first is seen.
 */
async function drainTimer(
  topic: string,
  n: number,
  onFirst: () => void,
  worker: { exited: () => string | undefined },
): Promise<number> {
  const admin = kafka.admin();
  await admin.connect();
  let first = 0;
  for (;;) {
    assertRunning([worker], `${n} results`);
    const offsets = await admin.fetchTopicOffsets(topic);
    const c = offsets.reduce((a, p) => a + Number(p.high) - Number(p.low), 0);
    if (c > 0 && !first) {
      first = Date.now();
      onFirst();
    }
    if (c >= n) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const seconds = (Date.now() - first) / 1000;
  await admin.disconnect();
  return seconds;
}

/**
 * The baseline issue 12 names: the best plain use of kafkajs for a consume-produce relay. `eachBatch` over up to 6
 * partitions at once, one `sendBatch` of the whole fetched batch (idempotent producer, acks=all), then the batch's
 * offset committed. Reads `task.noop` with its own consumer group and writes `relay.out`. Returns messages/s from
 * the first batch to the last message.
 */
async function batchedRelay(prefix: string, n: number, partitions: number): Promise<Measured> {
  return eachBatchMeasured(prefix, 'batched-relay', n, partitions, async (batch, producer) => {
    await producer.sendBatch({
      acks: -1,
      topicMessages: [
        {
          topic: `${prefix}relay.out`,
          messages: batch.messages.map((m) => ({ key: m.key, value: m.value })),
        },
      ],
    });
  });
}

/**
 * Runs `work` over each fetched batch of the bench's task topic (`eachBatch`, up to `partitions` at once, consumer
 * group `<prefix><group>`, a producer of its own: idempotent, one request in flight), commits the batch's offset
 * after it, and resolves once `n` records were worked with the rate from the first batch to the last and the CPU
 * split over that window.
 */
async function eachBatchMeasured(
  prefix: string,
  group: string,
  n: number,
  partitions: number,
  work: (batch: Batch, producer: Producer) => Promise<void>,
): Promise<Measured> {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const consumer = kafka.consumer({ groupId: `${prefix}${group}` });
  await consumer.connect();
  await consumer.subscribe({ topic: `${prefix}${NOOP_TOPIC}`, fromBeginning: true });
  let done = 0;
  let t0 = 0;
  let cpu = (): Record<string, number> => ({});
  await consumer.run({
    autoCommit: false,
    partitionsConsumedConcurrently: partitions,
    eachBatch: async ({ batch }) => {
      if (batch.messages.length === 0) return;
      if (!t0) {
        t0 = Date.now();
        cpu = cpuShares({});
      }
      await work(batch, producer);
      await consumer.commitOffsets([
        {
          topic: batch.topic,
          partition: batch.partition,
          offset: (BigInt(batch.lastOffset()) + 1n).toString(),
        },
      ]);
      done += batch.messages.length;
    },
  });
  await eventually(group, () => done >= n, benchWait(600_000, group));
  // The CPU split is taken here, over the rate's own window: measured after the disconnect (seconds of leaving the
  // group, almost no CPU), it read as a fraction of the CPU the relay really used.
  const measured = { rate: (n - 1) / ((Date.now() - t0) / 1000), cpu: cpu() };
  await consumer.disconnect();
  await producer.disconnect();
  return measured;
}

/** A rate (messages/s, first message to last) and each process's CPU share over the same window (see cpuShares). */
interface Measured {
  rate: number;
  cpu: Record<string, number>;
}

/**
 * CPU of one message or task of `m`, in µs: the share of a core its process used (all its threads, GC included) over
 * the rate's window, divided by the rate; `proc` is a name of the split (`worker`, or `bench` for what runs in this
 * process). Steadier than the rate across this machine's phases: the worker's 58.7, 60.2, 61.2 µs in three runs whose
 * rates spread 13,468-17,442 tasks/s (2026-12-07 05:41-05:45), so a change of a tenth in what a task costs shows.
 */
const usPerItem = (m: Measured, proc: string) => ((m.cpu[proc] ?? NaN) / m.rate) * 1e6;

/**
 * The worker runtime's floor: the worker's own ordered consumer and coalescing producer, with the worker's default
 * settings (WORKER_* in services/workers/src/config.ts), forwarding each record's key and value to `relay.out` and
 * doing nothing else: no decoding, no idempotency store, no handler, no result encoding. What the worker spends
 * beyond it is the executor's; what it spends beyond the batched relay is the per-record dispatch (key chains,
 * in-flight bounds, prefix commits, one send per record). Runs in this process, like the relay.
 */
async function runtimeFloor(prefix: string, n: number): Promise<Measured> {
  const cfg = loadWorkerConfig({
    ...process.env,
    KEYFLOW_TOPIC_PREFIX: prefix,
    WORKER_TASK_TYPES: noop.type,
  });
  const logger = createLogger('bench', { level: 'warn' });
  const own = createKafka({ brokers, clientId: 'bench-floor', logger });
  const producer = createIdempotentProducer(own);
  await producer.connect();
  const out = new BatchingProducer(producer);
  let done = 0;
  let t0 = 0;
  let cpu = (): Record<string, number> => ({});
  const consumer = new OrderedConsumer({
    kafka: own,
    groupId: `${prefix}runtime-floor`,
    topics: [`${prefix}${NOOP_TOPIC}`],
    logger,
    maxInFlight: cfg.WORKER_MAX_IN_FLIGHT,
    maxInFlightPerPartition: cfg.WORKER_MAX_IN_FLIGHT_PER_PARTITION,
    partitionsConsumedConcurrently: cfg.WORKER_PARTITIONS_CONCURRENTLY,
    fetchMaxWaitMs: cfg.WORKER_FETCH_MAX_WAIT_MS,
    handle: async (m) => {
      if (!t0) {
        t0 = Date.now();
        cpu = cpuShares({});
      }
      await out.send(`${prefix}relay.out`, { key: m.key, value: m.value });
      done++;
    },
  });
  await consumer.start();
  await eventually('condition', () => done >= n, benchWait(600_000, 'condition'));
  const measured = { rate: (n - 1) / ((Date.now() - t0) / 1000), cpu: cpu() };
  await consumer.stop();
  await producer.disconnect();
  return measured;
}

/**
 * The library ceiling: the work a worker cannot leave out, done with the design card's libraries and nothing of the
 * worker runtime, the whole fetched batch at a time, as {@link batchedRelay} does: each command decoded (avsc, through
 * the codec), one idempotency begin call for the batch's leases (the store's Lua script, ioredis), each input parsed
 * and the no-op handler called, one complete call for the batch's records, each result encoded as the worker encodes
 * it (TaskCompleted, UUID v5 event id), one `sendBatch` (acks=all), then the batch's offset committed. No per-task
 * promise, lease renewal, timeout, retry, span or metric, and one batch at a time per partition (no per-key order
 * beyond the partition's): not a worker, a bound. What the worker spends beyond it is the runtime's; what it spends
 * beyond the relay is the libraries'. Its own consumer group and key prefix in Redis (keys expire like the worker's).
 */
async function libraryCeiling(
  prefix: string,
  codec: EventCodec,
  n: number,
  partitions: number,
): Promise<Measured> {
  // The worker's Redis, as the worker is given it (BENCH_WORKER_REDIS_URL and its TLS settings when set).
  const cfg = loadWorkerConfig({
    ...process.env,
    ...serviceOnlyEnv('WORKER'),
    KEYFLOW_TOPIC_PREFIX: prefix,
    WORKER_TASK_TYPES: noop.type,
  });
  const redis = createRedis(cfg.redis, { enableAutoPipelining: true });
  const store = new IdempotencyStore<{ kind: 'completed'; output: string; durationMs: number }>(redis, {
    keyPrefix: `${prefix}ceiling:`,
    leaseMs: cfg.WORKER_LEASE_MS,
    completionTtlMs: cfg.WORKER_COMPLETION_TTL_MS,
  });
  const handler = (input: unknown) => (input === undefined ? null : {});
  const results = `${prefix}task.results.ceiling`; // a bench-only topic, not in the catalog
  const measured = await eachBatchMeasured(
    prefix,
    'library-ceiling',
    n,
    partitions,
    async (batch, producer) => {
      const cmds: TaskCommand[] = [];
      for (const m of batch.messages) {
        const loc = { topic: batch.topic, partition: batch.partition, offset: m.offset };
        const known = codec.decodeIfKnown(NOOP_TOPIC, m.value, loc);
        cmds.push((known ?? (await codec.decode(NOOP_TOPIC, m.value, loc))).value as TaskCommand);
      }
      const begun = await store.beginMany(cmds.map((c) => ({ key: c.idempotencyKey, attempt: c.attempt })));
      const ran: Array<{
        c: TaskCommand;
        lease: { key: string; token: string; attempt: number };
        output: string;
      }> = [];
      begun.forEach((b, i) => {
        if (b instanceof Error) throw b; // Redis did not answer: kafkajs retries the batch
        // A batch redelivered after a rebalance finds its records: nothing to run again (the relay re-sends).
        if (b.state !== 'acquired') return;
        const c = cmds[i];
        ran.push({ c, lease: b.lease, output: JSON.stringify(handler(JSON.parse(c.input))) });
      });
      const held = await store.completeMany(
        ran.map((r) => ({
          lease: r.lease,
          result: { kind: 'completed', output: r.output, durationMs: 0 },
          ok: true,
        })),
      );
      if (held.some((h) => h !== true)) throw new Error('ceiling: a completion record was refused');
      const messages = ran.map(({ c, output }) => ({
        key: c.runId,
        value: codec.encode(Topic.TASK_RESULTS, 'TaskCompleted', {
          metadata: newMetadata('TaskCompleted', {
            key: c.runId,
            correlationId: c.metadata.correlationId,
            causationId: c.metadata.eventId,
            eventId: derivedEventId(c.metadata.eventId, 'completed'),
          }),
          runId: c.runId,
          stepId: c.stepId,
          taskType: c.taskType,
          attempt: c.attempt,
          idempotencyKey: c.idempotencyKey,
          output,
          outputRef: null,
          durationMs: 0,
          workerId: 'bench',
          replayed: false,
        } satisfies TaskCompleted),
      }));
      await producer.sendBatch({ acks: -1, topicMessages: [{ topic: results, messages }] });
    },
  );
  redis.disconnect();
  return measured;
}

/** The bench's first relay, kept for comparison only: one awaited `send` per message (not a fair baseline). */
async function rawRelay(prefix: string, n: number): Promise<number> {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const consumer = kafka.consumer({ groupId: `${prefix}relay` });
  await consumer.connect();
  await consumer.subscribe({ topic: `${prefix}${NOOP_TOPIC}`, fromBeginning: true });
  let relayed = 0;
  let t0 = 0;
  await consumer.run({
    partitionsConsumedConcurrently: 4,
    eachMessage: async ({ message }) => {
      t0 ||= Date.now();
      await producer.send({
        topic: `${prefix}relay.out`,
        acks: -1,
        messages: [{ key: message.key, value: message.value }],
      });
      relayed++;
    },
  });
  await eventually('condition', () => relayed >= n, benchWait(600_000, 'condition'));
  const rate = (n - 1) / ((Date.now() - t0) / 1000); // first message to last
  await consumer.disconnect();
  await producer.disconnect();
  return rate;
}

async function main() {
  const partitions = Number(opts.partitions);
  const tasks = Number(opts.tasks);
  const run = benchTopics(`bench-${Date.now()}.`);
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const sink = opts.otlp ? await otlpSink() : undefined;
  otlpEndpoint = sink?.url;
  console.log(tracingLine(sink));
  const own = serviceOnlyEnv('WORKER');
  console.log(
    `worker connects: ${own.KAFKA_SECURITY_PROTOCOL ?? 'PLAINTEXT'} to ${own.KAFKA_BROKERS ?? brokers.join(',')}, Redis ${describeRedis(redisConnectionFromEnv(own.REDIS_URL ?? process.env.REDIS_URL ?? '', own))}`,
  );

  // 1. Throughput draining a backlog: worker vs raw relay over the same commands.
  const codec = await setup(run, partitions);
  await produce(producer, codec, 0, tasks);
  const worker = startWorker(run, opts.profile, await freePort());
  // Results are counted from the topic's end offsets, not consumed: a decoding consumer in this process would take
  // CPU from the worker on the same cores, and the relay below runs without one. CPU is measured from the first
  // result (the worker's startup excluded) to the last.
  let workerCpu = (): Record<string, number> => ({});
  const drainSeconds = await drainTimer(
    codec.physical(Topic.TASK_RESULTS),
    tasks,
    () => {
      workerCpu = cpuShares({ worker: worker.proc.pid });
    },
    worker,
  );
  const workerRate = (tasks - 1) / drainSeconds; // first result to last
  const workerMeasured: Measured = { rate: workerRate, cpu: workerCpu() };
  const waves = await waveSizes(`http://127.0.0.1:${worker.port}`);
  await worker.stop();
  const relay = await batchedRelay(run, tasks, partitions);
  const floor = await runtimeFloor(run, tasks);
  const ceiling = await libraryCeiling(run, codec, tasks, partitions);
  const perMessageRate = await rawRelay(run, tasks);
  console.log(`throughput (backlog of ${tasks}, ${partitions} partitions, 1 worker process, no-op handler):`);
  console.log(
    `  worker: ${workerRate.toFixed(0)} tasks/s   baseline, batched kafkajs relay (eachBatch, one sendBatch, acks=all, commit after send): ${relay.rate.toFixed(0)} msgs/s   ratio ${(workerRate / relay.rate).toFixed(2)}`,
  );
  console.log(
    `  runtime floor (the worker's ordered consumer and batching producer forwarding each record, no executor): ${floor.rate.toFixed(0)} msgs/s   floor / relay ${(floor.rate / relay.rate).toFixed(2)}   worker / floor ${(workerRate / floor.rate).toFixed(2)}`,
  );
  console.log(
    `  library ceiling (the worker's mandatory work, a fetched batch at a time, libraries only: decode, one begin and one complete call, encode, sendBatch): ${ceiling.rate.toFixed(0)} tasks/s   ceiling / relay ${(ceiling.rate / relay.rate).toFixed(2)}   worker / ceiling ${(workerRate / ceiling.rate).toFixed(2)}`,
  );
  console.log(
    `  CPU while the worker drains, first result to last (one core = 100%): ${formatShares(workerMeasured.cpu)}`,
  );
  console.log(
    `  CPU while the relay runs, first batch to last message (bench = the relay): ${formatShares(relay.cpu)}`,
  );
  console.log(
    `  CPU while the floor runs, first record to last (bench = the floor): ${formatShares(floor.cpu)}`,
  );
  console.log(
    `  CPU while the ceiling runs, first batch to last (bench = the ceiling): ${formatShares(ceiling.cpu)}`,
  );
  const us = {
    worker: usPerItem(workerMeasured, 'worker'),
    relay: usPerItem(relay, 'bench'),
    floor: usPerItem(floor, 'bench'),
    ceiling: usPerItem(ceiling, 'bench'),
  };
  console.log(
    `  CPU per task of its process, µs: worker ${us.worker.toFixed(1)}   relay ${us.relay.toFixed(1)}   floor ${us.floor.toFixed(1)}   ceiling ${us.ceiling.toFixed(1)}   ceiling / worker ${(us.ceiling / us.worker).toFixed(2)} (the ratio target 3 asks of the rates, from CPU instead)`,
  );
  console.log(
    `  the worker's waves (tasks leased in one begin call, its keyflow_worker_wave_tasks histogram): ${waves.count} waves, ${waves.mean.toFixed(1)} tasks each on average`,
  );
  console.log(
    `  for comparison only, a relay awaiting one send per message: ${perMessageRate.toFixed(0)} msgs/s (not a fair baseline)`,
  );

  // 2. Latency at a steady offered rate.
  const lat = benchTopics(`bench-lat-${Date.now()}.`);
  const latCodec = await setup(lat, partitions);
  const latResults = await resultCounter(latCodec, `${lat}results`);
  const w2 = startWorker(lat);
  await new Promise((r) => setTimeout(r, 3_000)); // let it join before offering load
  const rate = Number(opts.rate);
  const total = rate * Number(opts.seconds);
  const start = Date.now();
  for (let i = 0; i < total; i += rate / 10) {
    const batch = Array.from({ length: rate / 10 }, (_, j) => command(i + j));
    const now = Date.now();
    batch.forEach((c) => latResults.sentAt.set(c.runId, now));
    await producer.send({
      topic: latCodec.physical(NOOP_TOPIC),
      acks: -1,
      messages: batch.map((c) => ({
        key: c.metadata.key,
        value: latCodec.encode(NOOP_TOPIC, 'TaskCommand', c),
      })),
    });
    const wait = start + ((i + rate / 10) / rate) * 1000 - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  await eventually(
    'latency results',
    () => latResults.count >= total,
    benchWait(120_000, 'latency results', [w2]),
  );
  console.log(
    `latency at ${rate} tasks/s offered for ${opts.seconds} s: p50 ${pct(latResults.latencies, 50)} ms, p95 ${pct(latResults.latencies, 95)} ms, p99 ${pct(latResults.latencies, 99)} ms`,
  );
  await w2.stop();
  await latResults.consumer.disconnect();

  // 3. Peak memory while draining a large backlog.
  const backlog = Number(opts.backlog);
  if (backlog > 0) {
    const mem = benchTopics(`bench-mem-${Date.now()}.`);
    const memCodec = await setup(mem, partitions);
    await produce(producer, memCodec, 0, backlog);
    const memResults = await resultCounter(memCodec, `${mem}results`);
    const w3 = startWorker(mem);
    const t1 = Date.now();
    await eventually(
      'backlog results',
      () => memResults.count >= backlog,
      benchWait(1_800_000, 'backlog results', [w3]),
    );
    console.log(
      `backlog of ${backlog}: drained in ${((Date.now() - t1) / 1000).toFixed(1)} s, worker peak RSS ${w3.peakRssMb().toFixed(0)} MiB`,
    );
    await w3.stop();
    await memResults.consumer.disconnect();
  }
  await producer.disconnect();
  closeSink(sink);
}

runBench(main);
