import { randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { Command } from 'commander';
import { CompressionTypes, Kafka, logLevel, Partitioners } from '@keyflow/kafka';
import { EventCodec, newMetadata } from '@keyflow/contracts';
import { snapshotParts, type RunState } from '@keyflow/workflow';
import { ROOT, benchTopics, runBench, stopProcess, trackSpawned } from './support';
import { Topic } from '@keyflow/schemas';

/**
 * Start-up benchmark (issue 39, fault 10): fills a namespaced, compacted wf.state (6 partitions) with N snapshot
 * records of ended three-step runs (about 700 bytes of state each), then starts an orchestrator process on it and
 * prints how long it takes from spawn to: its HTTP listener ('orchestrator ready'), every partition restored from
 * wf.state ('partition restored from wf.state', the engine then takes inputs), and the read model holding every run
 * (/health runsKnown). The orchestrator keeps ended runs 72 h by default, so none is forgotten meanwhile.
 *   eval "$(infra/local/stack.sh up)" && npm run bench:startup -- --records 1000000
 */
const opts = new Command()
  .option('--records <n>', 'snapshot records written to wf.state before the orchestrator starts', '1000000')
  .option('--timeout-s <n>', 'give up when start-up takes longer, in seconds', '3600')
  .parse()
  .opts<{ records: string; timeoutS: string }>();

const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
const registryUrl = process.env.SCHEMA_REGISTRY_URL ?? '';
if (!brokers.length || !registryUrl)
  throw new Error('KAFKA_BROKERS and SCHEMA_REGISTRY_URL must be set: eval "$(infra/local/stack.sh up)"');

const PARTITIONS = 6;

/** An ended three-step run, as the engine snapshots it (its core record's state text). */
function endedRun(runId: string, at: number): string {
  const step = (id: string, i: number) => ({
    id,
    status: 'completed',
    attempt: 1,
    startedAt: at + i,
    endedAt: at + i + 1,
    output: { echoed: { step: id, orderId: runId } },
  });
  const state = {
    runId,
    workflow: 'three-step',
    version: 1,
    businessKey: runId,
    input: { orderId: runId, amount: 42 },
    status: 'completed',
    plan: ['validate', 'reserve', 'confirm'],
    position: 3,
    steps: Object.fromEntries(['validate', 'reserve', 'confirm'].map((id, i) => [id, step(id, i)])),
    timers: {},
    compensable: [],
    signals: {},
    output: { confirmed: true },
    startedAt: at,
    updatedAt: at + 3,
    endedAt: at + 3,
    sequence: 4,
    timeline: [],
  } as unknown as RunState;
  return snapshotParts(state, undefined).core;
}

async function fill(prefix: string, n: number): Promise<void> {
  const codec = new EventCodec({ registryUrl, topicPrefix: prefix });
  const kafka = new Kafka({ brokers, clientId: 'bench-startup-fill', logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({
    waitForLeaders: true,
    topics: [
      {
        topic: codec.physical(Topic.WF_STATE),
        numPartitions: PARTITIONS,
        // As Engine.topics creates it.
        configEntries: [
          { name: 'cleanup.policy', value: 'compact' },
          { name: 'min.compaction.lag.ms', value: '60000' },
        ],
      },
    ],
  });
  await admin.disconnect();
  await codec.registerTopics([Topic.WF_STATE]);
  // murmur2 as the engine's JavaCompatiblePartitioner: each run on the partition its inputs would be on.
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const at = Date.now();
  const t0 = Date.now();
  for (let i = 0; i < n; i += 1000) {
    const messages = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) {
      const runId = `bench-${j}-${randomUUID()}`;
      messages.push({
        key: runId,
        value: codec.encode(Topic.WF_STATE, 'RunSnapshot', {
          metadata: newMetadata('RunSnapshot', { key: runId, correlationId: runId }),
          runId,
          sequence: 4,
          status: 'completed',
          state: endedRun(runId, at),
          stateRef: null,
          segment: null,
        }),
      });
    }
    // gzip as the engine's transactions: 1,000 records stay under the broker's message.max.bytes.
    await producer.send({
      topic: codec.physical(Topic.WF_STATE),
      acks: -1,
      compression: CompressionTypes.GZIP,
      messages,
    });
    if ((i / 1000) % 100 === 99) console.log(`  ${i + messages.length} records written`);
  }
  await producer.disconnect();
  console.log(`wf.state filled: ${n} records in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

async function main() {
  const n = Number(opts.records);
  const prefix = benchTopics(`bench-startup-${Date.now()}.`);
  await fill(prefix, n);
  const env = {
    ...process.env,
    LOG_LEVEL: 'info',
    KEYFLOW_TOPIC_PREFIX: prefix,
    ORCHESTRATOR_GROUP_ID: `${prefix}orch`,
    ORCHESTRATOR_PARTITIONS: String(PARTITIONS),
    ORCHESTRATOR_HTTP_PORT: '0',
  };
  const t0 = Date.now();
  const proc = trackSpawned(
    spawn(
      process.execPath,
      ['-r', '@swc-node/register', join(ROOT, 'examples/test-workloads/src/orchestrator.ts')],
      { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'inherit'] },
    ),
  );
  const at: Record<string, number> = {};
  let url = '';
  let restored = 0;
  let exits = 0;
  proc.once('exit', (code) => {
    exits++;
    console.error(`orchestrator exited with ${code}`);
  });
  createInterface({ input: proc.stdout! }).on('line', (line) => {
    if (line.includes('"orchestrator ready"')) {
      at.ready = Date.now() - t0;
      url = (JSON.parse(line) as { http: string }).http;
    }
    if (line.includes('"partition restored from wf.state"') && ++restored === PARTITIONS)
      at.restored = Date.now() - t0;
  });
  const deadline = t0 + Number(opts.timeoutS) * 1000;
  try {
    for (;;) {
      if (exits) throw new Error('the orchestrator exited during start-up');
      if (Date.now() > deadline) throw new Error(`start-up not done within ${opts.timeoutS} s`);
      if (url && at.known === undefined) {
        const h = (await fetch(`${url}/health`)
          .then((r) => r.json())
          .catch(() => ({}))) as { runsKnown?: number };
        if ((h.runsKnown ?? 0) >= n) at.known = Date.now() - t0;
      }
      if (at.known !== undefined && at.restored !== undefined) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
    console.log(
      `start-up on ${n} wf.state records (${PARTITIONS} partitions), from spawn: HTTP ready ${s(at.ready)}, ` +
        `every partition restored ${s(at.restored)}, read model holds every run ${s(at.known)} ` +
        `(${Math.round(n / (at.known / 1000))} records/s)`,
    );
  } finally {
    await stopProcess(proc);
  }
}

runBench(main);
