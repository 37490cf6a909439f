import { randomUUID } from 'node:crypto';
import { loadavg } from 'node:os';
import { Command } from 'commander';
import { CompressionTypes, Kafka, logLevel, Partitioners } from 'kafkajs';
import { EventCodec, newMetadata } from '@keyflow/contracts';
import { TRANSACTIONAL_RETRY } from '@keyflow/kafka';
import { echo } from '@keyflow/testing';
import { chainLatency } from './chain';
import { hopBreakdown } from './hops';
import {
  closeSink,
  cpuSplit,
  httpClient,
  otlpSink,
  pct,
  positiveInt,
  readLifecycle,
  serviceOnlyEnv,
  spawnService,
  tracingLine,
  benchWait,
  benchTopics,
  runBench,
} from './support';
import { eventually } from '@keyflow/testing';
import { Topic } from '@keyflow/schemas';

/**
 * Orchestrator benchmark: the built-in `three-step` workflow (3 task steps) against 2 worker processes running
 * the no-op `echo` handler. Prints, from one run on the local stack:
 *  - runs/s and step transitions/s (inputs applied: starts and results) when a burst of runs is started at once;
 *  - p50/p95 start-to-finish latency (HTTP POST accepted -> RunCompleted occurred) at several offered loads;
 *  - with `--backlog N`: step transitions/s from N StartRun records written to wf.requests before the services start
 *    (so HTTP is not the limit; 4 transitions per run: the start and three results; the workers start before the
 *    orchestrator, so its time is not spent waiting for them), next to the baseline of the
 *    same run: a plain kafkajs transactional relay of those N records (eachBatch, one transaction per batch:
 *    sendBatch, sendOffsets, commit; acks=all), the best plain use of the client for consume-transform-produce.
 *  - runs accepted over HTTP per second (POST /runs answered 202 once StartRun is acknowledged by all in-sync
 *    replicas) with 64 and 256 requests in flight, next to a raw batched kafkajs produce of as many StartRun records
 *    in the same run, and the CPU split of the processes meanwhile (bench = this process, the HTTP client);
 *  - the latency baseline: a plain kafkajs chain of the same hops (bench/chain.ts);
 *  - with `--local`: after each load step, the same load of `three-step-local` (the same three echo calls as local
 *    steps, run in the orchestrator: docs/workflows.md "Local steps"), so remote and local steps meet in one run.
 * Tracing on and off: `--otlp` has the orchestrator and the workers export their spans to an OTLP/HTTP sink this bench
 * runs. TLS and auth on and off: `BENCH_ORCHESTRATOR_<NAME>` and `BENCH_WORKER_<NAME>` variables go to those services
 * alone (e.g. a SASL_SSL listener), while the bench's own clients and the baselines stay on the plaintext listener.
 *   eval "$(infra/local/stack.sh up)" && npm run bench:orchestrator -- --accept 10000 --burst 2000 --loads 20,50,100
 *   eval "$(infra/local/stack.sh up)" && npm run bench:orchestrator -- --backlog 20000 --burst 0 --loads 20
 */
const opts = new Command()
  .option('--burst <n>', 'runs started at once for the throughput figures', '2000')
  .option('--loads <list>', 'offered loads, runs/s', '20,50,100')
  .option('--seconds <n>', 'duration of each load step', '10')
  .option('--workers <n>', 'worker processes', '2')
  .option(
    '--backlog <n>',
    'StartRun records pre-filled in wf.requests for the engine figure (0 to skip)',
    '0',
  )
  .option(
    '--accept <n>',
    'runs started over HTTP, --accept-concurrency requests in flight, for the accept rate (0 to skip; skipped with --backlog)',
    '5000',
  )
  .option(
    '--accept-concurrency <list>',
    'requests in flight during the accept figure, one figure each',
    '64,256',
  )
  .option('--profile <dir>', 'write a V8 CPU profile (.cpuprofile) of the orchestrator into <dir>')
  .option(
    '--otlp',
    'tracing on: the orchestrator and the workers export their spans over OTLP/HTTP to a sink this bench runs (counted, not kept)',
  )
  .option(
    '--hops',
    "each load step's runs hop by hop, from their records' timestamps (bench/hops.ts): p50/p95/p99 per hop",
  )
  .option(
    '--local',
    'after each remote load step, the same load of `three-step-local` (its three echo steps are local steps: run in the orchestrator, no worker round trip)',
  )
  .option('--no-chain', 'skip the latency baseline (a plain kafkajs chain of the same hops, bench/chain.ts)')
  .parse()
  .opts<{
    burst: string;
    loads: string;
    seconds: string;
    workers: string;
    backlog: string;
    accept: string;
    acceptConcurrency: string;
    profile?: string;
    otlp?: boolean;
    hops?: boolean;
    local?: boolean;
    chain: boolean;
  }>();

/** Checked before anything starts: a bad value must not leave started services behind. */
const workerCount = positiveInt('--workers', opts.workers);

const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
const registryUrl = process.env.SCHEMA_REGISTRY_URL ?? '';
if (!brokers.length || !registryUrl)
  throw new Error('KAFKA_BROKERS and SCHEMA_REGISTRY_URL must be set: eval "$(infra/local/stack.sh up)"');

async function main() {
  const prefix = benchTopics(`bench-orch-${Date.now()}.`);
  const env = {
    KEYFLOW_TOPIC_PREFIX: prefix,
    ORCHESTRATOR_GROUP_ID: `${prefix}orch`,
    WORKER_GROUP_ID: `${prefix}workers`,
    ORCHESTRATOR_PARTITIONS: '6',
    WORKER_RESULT_PARTITIONS: '6',
  };
  const sink = opts.otlp ? await otlpSink() : undefined;
  const tracing: Record<string, string> = sink ? { OTEL_EXPORTER_OTLP_ENDPOINT: sink.url } : {};
  const orchEnv = { ...env, ...tracing, ...serviceOnlyEnv('ORCHESTRATOR') };
  const workerEnv = { ...env, ...tracing, WORKER_TASK_TYPES: echo.type, ...serviceOnlyEnv('WORKER') };
  const connects = (e: Record<string, string>) =>
    `${e.KAFKA_SECURITY_PROTOCOL ?? 'PLAINTEXT'} to ${e.KAFKA_BROKERS ?? brokers.join(',')}`;
  console.log(
    `${tracingLine(sink)}; orchestrator connects: ${connects(orchEnv)}; workers: ${connects(workerEnv)}`,
  );
  const backlog = Number(opts.backlog);
  // The relay baseline runs twice over the backlog's records, before the services start and after the engine is
  // done (this machine's speed moves between minutes); the ratio is against the faster of the two, which is
  // conservative: the engine is measured once, and the first relay has the machine to itself.
  let relayBefore = 0;
  if (backlog > 0) {
    await prefill(prefix, backlog);
    relayBefore = await transactionalRelay(prefix, `${prefix}wf.requests`, backlog, 'before');
  }
  const tServices = Date.now();
  const spawnWorkers = () =>
    Array.from({ length: workerCount }, () =>
      spawnService('examples/test-workloads/src/worker.ts', workerEnv, 'worker ready'),
    );
  // With a backlog the workers start first, so the engine's time (from its first lifecycle event) is not spent
  // waiting for them to start; else after the accept phase, which the engine measures without them.
  const early = backlog > 0 ? spawnWorkers() : undefined;
  if (early) await Promise.all(early.map((w) => w.ready));
  const orch = spawnService(
    'examples/test-workloads/src/orchestrator.ts',
    orchEnv,
    'orchestrator ready',
    // Node writes the profile when the process exits (the bench stops it with SIGTERM).
    opts.profile ? ['--cpu-prof', `--cpu-prof-dir=${opts.profile}`] : [],
  );
  const url = await orch.ready;

  const codec = new EventCodec({ registryUrl, topicPrefix: prefix });
  await codec.registerTopics([Topic.WF_EVENTS]);
  const kafka = new Kafka({ brokers, clientId: 'bench', logLevel: logLevel.NOTHING });
  const completedAt = new Map<string, number>();
  let events = 0;
  let firstEventAt = Number.POSITIVE_INFINITY;
  const consumer = await readLifecycle(kafka, codec, `${prefix}events`, (d) => {
    events++;
    firstEventAt = Math.min(firstEventAt, d.value.metadata.occurredAt);
    if (d.event === 'RunCompleted') completedAt.set(d.value.runId, d.value.metadata.occurredAt);
  });
  const http = httpClient(url);
  const start = async (tag: string, workflow = 'three-step') => {
    const res = await http.post('/runs', { workflow, input: { tag } });
    if (res.status !== 202) throw new Error(`start failed: HTTP ${res.status}`);
    return (res.json as { runId: string }).runId;
  };

  // Accept rate over HTTP, next to a raw batched produce of the same number of StartRun records in the same run.
  // The workers start after it: the engine starts the accepted runs meanwhile (their first commands wait).
  // Not with a backlog: the engine would be draining it meanwhile.
  const acceptN = backlog > 0 ? 0 : Number(opts.accept);
  for (const inFlight of acceptN > 0 ? opts.acceptConcurrency.split(',').map(Number) : []) {
    const acceptIds: string[] = [];
    let next = 0;
    const tA = Date.now();
    const cpu = cpuSplit({ orchestrator: orch.proc.pid });
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next < acceptN) acceptIds.push(await start(`a${inFlight}-${next++}`));
      }),
    );
    const acceptRate = acceptN / ((Date.now() - tA) / 1000);
    const acceptCpu = cpu();
    const rawRate = await rawProduce(codec, `${prefix}wf.requests.raw`, acceptN);
    console.log(
      `accept: ${acceptN} runs started over HTTP, ${inFlight} requests in flight: ${acceptRate.toFixed(0)} runs/s   baseline, raw batched kafkajs produce of ${acceptN} StartRun records (sendBatch of up to 5,000, acks=all, idempotent): ${rawRate.toFixed(0)} msgs/s   ratio ${(acceptRate / rawRate).toFixed(3)}`,
    );
    console.log(`  CPU while accepting (one core = 100%): ${acceptCpu}`);
  }
  const acceptTotal = acceptN * (acceptN > 0 ? opts.acceptConcurrency.split(',').length : 0);

  const workers = early ?? spawnWorkers();
  await Promise.all(workers.map((w) => w.ready));
  const tReady = Date.now();
  const drainCpu = cpuSplit({
    orchestrator: orch.proc.pid,
    ...Object.fromEntries(workers.map((w, i) => [`worker${i + 1}`, w.proc.pid])),
  });
  if (acceptTotal > 0)
    await eventually(
      'accepted runs',
      () => completedAt.size >= acceptTotal,
      benchWait(600_000, 'accepted runs', [orch, ...workers]),
    );

  // 0. The pre-filled backlog: every run completes; then the transactional relay over the same records.
  if (backlog > 0) {
    await eventually(
      'backlog runs',
      () => completedAt.size >= backlog,
      benchWait(1_200_000, 'backlog runs', [orch, ...workers]),
    );
    const drainSplit = drainCpu();
    // From the engine's first lifecycle event to its last RunCompleted (its own clock): startup excluded.
    const engineSecs = (Math.max(...completedAt.values()) - firstEventAt) / 1000;
    const engineRate = (backlog * 4) / engineSecs;
    const relayAfter = await transactionalRelay(prefix, codec.physical(Topic.WF_REQUESTS), backlog, 'after');
    const relayRate = Math.max(relayBefore, relayAfter);
    // The engine's volume on the same relay: four records per input, about what the engine writes in this bench
    // (commands, lifecycle events, snapshots), gzip as its transactions are. Not the target's baseline: what Kafka
    // and kafkajs alone cost for that volume.
    const relayVolume = await transactionalRelay(prefix, codec.physical(Topic.WF_REQUESTS), backlog, 'x4', {
      copies: 4,
      compression: CompressionTypes.GZIP,
    });
    console.log(
      `backlog of ${backlog} three-step runs in wf.requests (6 partitions), 1 orchestrator + 2 workers, from their start:`,
    );
    console.log(
      `  engine: ${engineRate.toFixed(0)} step transitions/s (${engineSecs.toFixed(1)} s from the first lifecycle event to the last RunCompleted; services ready in ${((tReady - tServices) / 1000).toFixed(1)} s)   baseline, transactional kafkajs relay (eachBatch, sendBatch + sendOffsets + commit per batch, acks=all): ${relayRate.toFixed(0)} msgs/s (the faster of ${relayBefore.toFixed(0)} before the services and ${relayAfter.toFixed(0)} after)   ratio ${(engineRate / relayRate).toFixed(2)}`,
    );
    console.log(
      `  the same relay writing the engine's volume (4 records per input, gzip): ${relayVolume.toFixed(0)} inputs/s   engine / that ${(engineRate / relayVolume).toFixed(2)}`,
    );
    console.log(
      `  CPU from the services being ready to the last RunCompleted (one core = 100%; bench = this process, reading wf.events): ${drainSplit}`,
    );
    // How many transactions the engine committed, and inputs per transaction (its own metric).
    const scraped = await (await fetch(`${url}/metrics`)).text();
    const figure = (series: string) =>
      Number(
        scraped.match(
          new RegExp(`^keyflow_orchestrator_transaction_inputs_${series}(?:\\{[^}]*\\})? (\\S+)`, 'm'),
        )?.[1] ?? NaN,
      );
    console.log(
      `  engine transactions: ${figure('count')}, ${(figure('sum') / figure('count')).toFixed(1)} inputs per transaction on average`,
    );
  }

  // 1. Burst.
  const eventsBefore = events;
  const burst = Number(opts.burst);
  if (burst > 0) {
    const t0 = Date.now();
    const ids: string[] = [];
    for (let i = 0; i < burst; i += 100)
      ids.push(
        ...(await Promise.all(
          Array.from({ length: Math.min(100, burst - i) }, (_, j) => start(`b${i + j}`)),
        )),
      );
    const accepted = Date.now();
    await eventually(
      'burst runs',
      () => ids.every((id) => completedAt.has(id)),
      benchWait(600_000, 'burst runs', [orch, ...workers]),
    );
    const secs = (Date.now() - t0) / 1000;
    // Inputs applied per run: 1 start + 3 results.
    console.log(
      `burst of ${burst} three-step runs: accepted in ${((accepted - t0) / 1000).toFixed(1)} s, all finished in ${secs.toFixed(1)} s`,
    );
    console.log(
      `  ${(burst / secs).toFixed(0)} runs/s, ${((burst * 4) / secs).toFixed(0)} step transitions/s, ${((events - eventsBefore) / secs).toFixed(0)} lifecycle events/s`,
    );
  }

  // 2. Latency at offered loads.
  const engineP50 = new Map<number, number>();
  const loadSteps = opts.loads
    .split(',')
    .map(Number)
    .filter(Boolean)
    .flatMap((rate) => [
      { rate, workflow: 'three-step' },
      ...(opts.local ? [{ rate, workflow: 'three-step-local' }] : []),
    ]);
  for (const { rate, workflow } of loadSteps) {
    const local = workflow !== 'three-step';
    const startedAt = new Map<string, number>();
    const stepStart = Date.now();
    const total = rate * Number(opts.seconds);
    for (let i = 0; i < total; i++) {
      const due = stepStart + (i * 1000) / rate;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const t = Date.now();
      void start(`l${rate}-${local ? 'local-' : ''}${i}`, workflow).then((id) => startedAt.set(id, t));
    }
    await eventually(
      `load ${rate}`,
      () => startedAt.size === total && [...startedAt.keys()].every((id) => completedAt.has(id)),
      benchWait(300_000, `load ${rate}`, [orch, ...workers]),
    );
    const lat = [...startedAt].map(([id, t]) => completedAt.get(id)! - t);
    if (!local) engineP50.set(rate, pct(lat, 50));
    console.log(
      `offered ${rate} runs/s for ${opts.seconds} s${local ? ' of three-step-local (local steps)' : ''}: start-to-finish p50 ${pct(lat, 50)} ms, p95 ${pct(lat, 95)} ms, p99 ${pct(lat, 99)} ms   (load average ${loadavg()[0].toFixed(2)})`,
    );
    if (opts.hops && !local)
      for (const line of await hopBreakdown({ brokers, registryUrl, prefix, startedAt }))
        console.log(`  ${line}`);
  }
  console.log(
    `peak RSS: orchestrator ${orch.peakRssMb().toFixed(0)} MiB, workers ${workers.map((w) => w.peakRssMb().toFixed(0)).join(' / ')} MiB`,
  );
  await consumer.disconnect();
  await http.close();
  await Promise.all([orch.stop(), ...workers.map((w) => w.stop())]);
  closeSink(sink);

  // 3. The latency baseline (issue 12 target 6), with the services stopped: the same hops by hand.
  if (opts.chain)
    for (const [rate, p50] of engineP50) {
      const c = await chainLatency({ brokers, prefix, rate, seconds: Number(opts.seconds) });
      console.log(
        `  baseline at ${rate} runs/s, plain kafkajs chain (HTTP accept + 7 hops, 4 in transactions; bench/chain.ts): p50 ${c.p50} ms, p95 ${c.p95} ms, p99 ${c.p99} ms   engine p50 / chain p50: ${(p50 / c.p50).toFixed(2)}   (load average ${loadavg()[0].toFixed(2)})`,
      );
    }
}

/** `n` StartRun records of `three-step` (keyed by run id, as the API writes them), from index `from`. */
function startRecords(codec: EventCodec, from: number, n: number, tag: string) {
  return Array.from({ length: n }, (_, j) => {
    const runId = `run-${randomUUID().replace(/-/g, '')}`;
    return {
      key: runId,
      value: codec.encode(Topic.WF_REQUESTS, 'StartRun', {
        metadata: newMetadata('StartRun', { key: runId, correlationId: runId }),
        runId,
        workflow: 'three-step',
        workflowVersion: 1,
        businessKey: runId,
        input: JSON.stringify({ tag: `${tag}${from + j}` }),
        idempotencyKey: null,
        trigger: 'bench',
        parent: null,
      }),
    };
  });
}

async function createTopic(kafka: Kafka, topic: string): Promise<void> {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic, numPartitions: 6 }] });
  await admin.disconnect();
}

/** Writes `n` StartRun records of `three-step` to wf.requests. */
async function prefill(prefix: string, n: number): Promise<void> {
  const codec = new EventCodec({ registryUrl, topicPrefix: prefix });
  const kafka = new Kafka({ brokers, clientId: 'bench-prefill', logLevel: logLevel.NOTHING });
  await createTopic(kafka, codec.physical(Topic.WF_REQUESTS));
  await codec.registerTopics([Topic.WF_REQUESTS]);
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  for (let i = 0; i < n; i += 1000)
    await producer.send({
      topic: codec.physical(Topic.WF_REQUESTS),
      acks: -1,
      messages: startRecords(codec, i, Math.min(1000, n - i), 'p'),
    });
  await producer.disconnect();
}

/**
 * The accept figure's baseline: `n` StartRun records, encoded beforehand, produced to `topic` (6 partitions, no
 * consumer) by an idempotent kafkajs producer in `sendBatch` calls of up to 5,000 records with acks=all, one call
 * after another (each call is one request per broker, its partitions' batches in it). Returns msgs/s.
 */
async function rawProduce(codec: EventCodec, topic: string, n: number): Promise<number> {
  await codec.registerTopics([Topic.WF_REQUESTS]);
  const kafka = new Kafka({ brokers, clientId: 'bench-raw', logLevel: logLevel.NOTHING });
  await createTopic(kafka, topic);
  const chunks: ReturnType<typeof startRecords>[] = [];
  for (let i = 0; i < n; i += 5000) chunks.push(startRecords(codec, i, Math.min(5000, n - i), 'r'));
  const producer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const t0 = Date.now();
  for (const messages of chunks) await producer.sendBatch({ acks: -1, topicMessages: [{ topic, messages }] });
  const secs = (Date.now() - t0) / 1000;
  await producer.disconnect();
  return n / secs;
}

/**
 * The baseline: relays the first `n` records of `topic` to `<topic>.relay-<tag>` with a transactional producer, one
 * transaction per fetched batch (sendBatch, sendOffsets, commit), as a plain kafkajs consume-transform-produce
 * loop would; its own consumer group and transactional id (`<prefix>tx-relay-<tag>`), so it can run more than once
 * over the same records. Returns msgs/s from the first batch to the last commit (input records per second).
 * `volume`: each input written `copies` times, batches compressed with `compression` (default once, uncompressed).
 */
async function transactionalRelay(
  prefix: string,
  topic: string,
  n: number,
  tag: string,
  volume: { copies: number; compression: CompressionTypes } = {
    copies: 1,
    compression: CompressionTypes.None,
  },
): Promise<number> {
  const kafka = new Kafka({ brokers, clientId: 'bench-relay', logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const out = `${topic}.relay-${tag}`;
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: out, numPartitions: 6 }] });
  await admin.disconnect();
  const groupId = `${prefix}tx-relay-${tag}`;
  const producer = kafka.producer({
    transactionalId: groupId,
    idempotent: true,
    maxInFlightRequests: 1,
    // The engine's retries: back-to-back transactions refused with CONCURRENT_TRANSACTIONS wait 5 ms, not 300.
    retry: TRANSACTIONAL_RETRY,
  });
  await producer.connect();
  const consumer = kafka.consumer({ groupId, readUncommitted: false });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let relayed = 0;
  let t0 = 0;
  let t1 = 0;
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch, resolveOffset }) => {
      if (batch.messages.length === 0) return;
      t0 ||= Date.now();
      const tx = await producer.transaction();
      try {
        await tx.sendBatch({
          acks: -1,
          compression: volume.compression,
          topicMessages: [
            {
              topic: out,
              messages: batch.messages.flatMap((m) =>
                Array.from({ length: volume.copies }, () => ({ key: m.key, value: m.value })),
              ),
            },
          ],
        });
        await tx.sendOffsets({
          consumerGroupId: groupId,
          topics: [
            {
              topic: batch.topic,
              partitions: [
                { partition: batch.partition, offset: (BigInt(batch.lastOffset()) + 1n).toString() },
              ],
            },
          ],
        });
        await tx.commit();
      } catch (e) {
        await tx.abort().catch(() => undefined);
        throw e;
      }
      resolveOffset(batch.lastOffset());
      relayed += batch.messages.length;
      if (relayed >= n) t1 ||= Date.now();
    },
  });
  await eventually('transactional relay', () => relayed >= n, benchWait(600_000, 'transactional relay'));
  await consumer.disconnect();
  await producer.disconnect();
  return n / ((t1 - t0) / 1000);
}

runBench(main);
