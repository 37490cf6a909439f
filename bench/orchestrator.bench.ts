import { Command } from 'commander';
import { Kafka, logLevel } from 'kafkajs';
import { EventCodec } from '@keyflow/contracts';
import { pct, spawnService, until } from './support';

/**
 * Orchestrator benchmark: the built-in `three-step` workflow (3 task steps) against 2 worker processes running
 * the no-op `echo` handler. Prints, from one run on the local stack:
 *  - runs/s and step transitions/s (inputs applied: starts and results) when a burst of runs is started at once;
 *  - p50/p95 start-to-finish latency (HTTP POST accepted -> RunCompleted occurred) at several offered loads.
 *   eval "$(infra/local/stack.sh up)" && npm run bench:orchestrator -- --burst 2000 --loads 20,50,100 --seconds 10
 */
const opts = new Command()
  .option('--burst <n>', 'runs started at once for the throughput figures', '2000')
  .option('--loads <list>', 'offered loads, runs/s', '20,50,100')
  .option('--seconds <n>', 'duration of each load step', '10')
  .parse()
  .opts<{ burst: string; loads: string; seconds: string }>();

const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
const registryUrl = process.env.SCHEMA_REGISTRY_URL ?? '';
if (!brokers.length || !registryUrl)
  throw new Error('KAFKA_BROKERS and SCHEMA_REGISTRY_URL must be set: eval "$(infra/local/stack.sh up)"');

async function main() {
  const prefix = `bench-orch-${Date.now()}.`;
  const env = {
    KEYFLOW_TOPIC_PREFIX: prefix,
    ORCHESTRATOR_GROUP_ID: `${prefix}orch`,
    WORKER_GROUP_ID: `${prefix}workers`,
    ORCHESTRATOR_PARTITIONS: '6',
    WORKER_RESULT_PARTITIONS: '6',
  };
  const orch = spawnService('services/orchestrator/src/main.ts', env, 'orchestrator ready');
  const url = await orch.ready;
  const workers = [0, 1].map(() =>
    spawnService('services/workers/src/main.ts', { ...env, WORKER_TASK_TYPES: 'echo' }, 'worker ready'),
  );
  await Promise.all(workers.map((w) => w.ready));

  const codec = new EventCodec({ registryUrl, topicPrefix: prefix });
  await codec.registerTopics(['wf.events']);
  const kafka = new Kafka({ brokers, clientId: 'bench', logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({
    groupId: `${prefix}events`,
    readUncommitted: false,
    maxWaitTimeInMs: 50,
  });
  const completedAt = new Map<string, number>();
  let events = 0;
  await consumer.connect();
  await consumer.subscribe({ topic: codec.physical('wf.events'), fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ topic, partition, message }) => {
      const d = await codec.decode('wf.events', message.value, { topic, partition, offset: message.offset });
      events++;
      if (d.event === 'RunCompleted') completedAt.set(d.value.runId, d.value.metadata.occurredAt);
    },
  });
  const start = async (tag: string) => {
    const res = await fetch(`${url}/runs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ workflow: 'three-step', input: { tag } }),
    });
    if (res.status !== 202) throw new Error(`start failed: HTTP ${res.status}`);
    return ((await res.json()) as { runId: string }).runId;
  };

  // 1. Burst.
  const burst = Number(opts.burst);
  const t0 = Date.now();
  const ids: string[] = [];
  for (let i = 0; i < burst; i += 100)
    ids.push(
      ...(await Promise.all(Array.from({ length: Math.min(100, burst - i) }, (_, j) => start(`b${i + j}`)))),
    );
  const accepted = Date.now();
  await until(() => ids.every((id) => completedAt.has(id)), 600_000, 'burst runs');
  const secs = (Date.now() - t0) / 1000;
  // Inputs applied per run: 1 start + 3 results.
  console.log(
    `burst of ${burst} three-step runs: accepted in ${((accepted - t0) / 1000).toFixed(1)} s, all finished in ${secs.toFixed(1)} s`,
  );
  console.log(
    `  ${(burst / secs).toFixed(0)} runs/s, ${((burst * 4) / secs).toFixed(0)} step transitions/s, ${(events / secs).toFixed(0)} lifecycle events/s`,
  );

  // 2. Latency at offered loads.
  for (const rate of opts.loads.split(',').map(Number)) {
    const startedAt = new Map<string, number>();
    const stepStart = Date.now();
    const total = rate * Number(opts.seconds);
    for (let i = 0; i < total; i++) {
      const due = stepStart + (i * 1000) / rate;
      const wait = due - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const t = Date.now();
      void start(`l${rate}-${i}`).then((id) => startedAt.set(id, t));
    }
    await until(
      () => startedAt.size === total && [...startedAt.keys()].every((id) => completedAt.has(id)),
      300_000,
      `load ${rate}`,
    );
    const lat = [...startedAt].map(([id, t]) => completedAt.get(id)! - t);
    console.log(
      `offered ${rate} runs/s for ${opts.seconds} s: start-to-finish p50 ${pct(lat, 50)} ms, p95 ${pct(lat, 95)} ms, p99 ${pct(lat, 99)} ms`,
    );
  }
  console.log(
    `peak RSS: orchestrator ${orch.peakRssMb().toFixed(0)} MiB, workers ${workers.map((w) => w.peakRssMb().toFixed(0)).join(' / ')} MiB`,
  );
  await consumer.disconnect();
  await Promise.all([orch.stop(), ...workers.map((w) => w.stop())]);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
