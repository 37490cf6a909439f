import { loadavg } from 'node:os';
import { Kafka, logLevel } from 'kafkajs';
import { EventCodec } from '@keyflow/contracts';
import { localStackPids } from '@keyflow/observability';
import { Topic } from '@keyflow/schemas';
import { echo } from '@keyflow/testing';
import {
  deleteTopicsUnder,
  httpClient,
  positiveInt,
  readFromStart,
  readLifecycle,
  ROOT,
  spawnService,
} from '../support';
import { BULK, coalesced, cpuParts, drive, pct, runEngine, verify, versionOf, type Started } from './common';

/**
 * keyflow at its defaults: 1 orchestrator and 1 worker process (PEERS_KEYFLOW_WORKERS; bench:orchestrator runs 2) of
 * examples/test-workloads (the `three-step` workflow of libs/testing: three `echo` steps, step k given step k-1's
 * output), on the stack's Kafka and registry, a fresh topic prefix (6 partitions). The client starts the runs it
 * starts together with one POST /runs/batch, a run started alone with POST /runs (each 202 once its StartRun is
 * acknowledged by the in-sync replicas; `startCoalesced`) and sees it finish by reading RunCompleted on
 * wf.events (read_committed). Step executions: the TaskCompleted records on task.results read uncommitted (every
 * result a worker wrote, aborted or not), per run and step.
 */
const STEPS = ['first', 'second', 'third'];

type StartBody = { workflow: string; input: unknown };

/**
 * The client's start: the runs started in one event-loop turn go in one `POST /runs/batch` (at most 1,000, the
 * endpoint's limit), as a client that starts many runs at once sends them; a run started alone in a `POST /runs`.
 * Resolves with the run id once its item is answered 202 (its StartRun durable in wf.requests).
 */
function startCoalesced(http: ReturnType<typeof httpClient>) {
  return coalesced<StartBody, string>(
    async (body) => {
      const res = await http.post('/runs', body);
      if (res.status !== 202) throw new Error(`start failed: HTTP ${res.status}`);
      return (res.json as { runId: string }).runId;
    },
    async (runs) => {
      const res = await http.post('/runs/batch', { runs });
      if (res.status !== 200) throw new Error(`batch start failed: HTTP ${res.status}`);
      return (res.json as { runs: Array<{ status: number; runId?: string }> }).runs.map((a) =>
        a.status === 202 ? a.runId! : new Error(`start failed: item status ${a.status}`),
      );
    },
    1000,
  );
}

async function bench() {
  const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
  const registryUrl = process.env.SCHEMA_REGISTRY_URL ?? '';
  if (!brokers.length || !registryUrl)
    throw new Error('KAFKA_BROKERS and SCHEMA_REGISTRY_URL must be set: eval "$(infra/local/stack.sh env)"');
  const prefix = `bench-peers-${Date.now()}.`;
  const env = {
    KEYFLOW_TOPIC_PREFIX: prefix,
    ORCHESTRATOR_GROUP_ID: `${prefix}orch`,
    WORKER_GROUP_ID: `${prefix}workers`,
    ORCHESTRATOR_PARTITIONS: '6',
    WORKER_RESULT_PARTITIONS: '6',
  };
  // PEERS_KEYFLOW_WORKERS=<n>: worker processes. Default 1, as Restate's and DBOS's rows run one service process: on
  // this 2-core machine a second one cost throughput and latency (2026-12-05 23:37-23:43 UTC, alternated three times:
  // 900 / 932 / 962 runs/s with one, 695 / 762 / 577 with two; BENCHMARKS.md "Peers").
  // Checked before anything starts: a bad value must not leave an orchestrator behind.
  const workerCount = positiveInt('PEERS_KEYFLOW_WORKERS', process.env.PEERS_KEYFLOW_WORKERS ?? '1');
  // PEERS_KEYFLOW_PROFILE=<dir>: a V8 CPU profile of the orchestrator (.cpuprofile) written there at its exit.
  const profile = process.env.PEERS_KEYFLOW_PROFILE;
  const orch = spawnService(
    'examples/test-workloads/src/orchestrator.ts',
    env,
    'orchestrator ready',
    profile ? ['--cpu-prof', `--cpu-prof-dir=${profile}`] : [],
  );
  const url = await orch.ready;
  const workers = Array.from({ length: workerCount }, () =>
    spawnService(
      'examples/test-workloads/src/worker.ts',
      { ...env, WORKER_TASK_TYPES: echo.type },
      'worker ready',
    ),
  );
  try {
    await Promise.all(workers.map((w) => w.ready));
    return await measure(
      prefix,
      brokers,
      registryUrl,
      url,
      orch.proc.pid!,
      workers.map((w) => w.proc.pid!),
    );
  } finally {
    await Promise.all([orch.stop(), ...workers.map((w) => w.stop())]);
    await deleteTopicsUnder(brokers, [prefix]);
  }
}

async function measure(
  prefix: string,
  brokers: string[],
  registryUrl: string,
  url: string,
  orchPid: number,
  workerPids: number[],
) {
  const codec = new EventCodec({ registryUrl, topicPrefix: prefix });
  await codec.registerTopics([Topic.WF_EVENTS, Topic.TASK_RESULTS]);
  const kafka = new Kafka({ brokers, clientId: 'bench-peers', logLevel: logLevel.NOTHING });
  const waiting = new Map<string, (output: unknown) => void>();
  const finished = new Map<string, unknown>();
  const completions = new Map<string, number>();
  // When the engine wrote each RunCompleted (its clock): bench:orchestrator's latency ends there, this one when
  // the client reads it (after the transaction's commit and a read_committed fetch).
  const occurredAt = new Map<string, number>();
  const startedAt = new Map<string, number>();
  const events = await readLifecycle(kafka, codec, `${prefix}events`, (d) => {
    if (d.event !== 'RunCompleted') return;
    const { runId, output } = d.value;
    occurredAt.set(runId, d.value.metadata.occurredAt);
    completions.set(runId, (completions.get(runId) ?? 0) + 1);
    // A keyflow run's output is every step's output by step name; the workload's output is the third's.
    const parsed = (JSON.parse(output) as { third?: unknown }).third;
    finished.set(runId, parsed);
    waiting.get(runId)?.(parsed);
  });
  const http = httpClient(url);
  const post = startCoalesced(http);
  const start = async (tag: string): Promise<Started> => {
    const t = Date.now();
    const id = await post({ workflow: 'three-step', input: { tag } });
    startedAt.set(id, t);
    const done = finished.has(id)
      ? Promise.resolve(finished.get(id))
      : new Promise<unknown>((r) => waiting.set(id, r));
    return { id, tag, done };
  };
  const stack = localStackPids(ROOT);
  const store = Object.entries(stack)
    .filter(([n]) => n !== 'redis')
    .map(([, p]) => p);
  const loadAvgBefore = loadavg();
  const { burst, load, runs, used } = await drive(start, () =>
    cpuParts(() => ({
      engine: [orchPid],
      workers: workerPids,
      store: store.length ? store : undefined,
    })),
  );
  // Step executions are counted once the measured phases are over: a reader of task.results beside them made a
  // fetch request for every result the worker wrote (read uncommitted), about 60 a second at 20 runs/s, on the
  // broker under test. Read from the start, it counts the same records.
  const executions = new Map<string, number>();
  // Read up to the end offsets of now (every result written), not only until each step was seen once: a second
  // TaskCompleted of a step behind the last new one must be counted too.
  const resultsTopic = codec.physical(Topic.TASK_RESULTS);
  const admin = kafka.admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(resultsTopic).finally(() => admin.disconnect());
  const readTo = new Map<number, bigint>();
  // Read up to where each batch ends: a partition's last records may be transaction markers, which no message reports.
  const results = await readFromStart(
    kafka,
    `${prefix}results`,
    resultsTopic,
    true,
    async (v, at) => {
      const d = await codec.decode(Topic.TASK_RESULTS, v, at);
      if (d.event !== 'TaskCompleted') return;
      const key = `${d.value.runId}:${STEPS.indexOf(d.value.stepId) + 1}`;
      executions.set(key, (executions.get(key) ?? 0) + 1);
    },
    (partition, next) => {
      if (next > (readTo.get(partition) ?? 0n)) readTo.set(partition, next);
    },
  );
  const behind = () =>
    ends.some(
      ({ partition, high, low }) =>
        BigInt(high) > BigInt(low) && (readTo.get(partition) ?? 0n) < BigInt(high),
    );
  for (let i = 0; i < 600 && behind(); i++) await new Promise((r) => setTimeout(r, 100));
  const verified = await verify(runs, executions, completions);
  const loop = runs.filter((r) => r.tag.startsWith('l'));
  const engineMs = loop.map((r) => occurredAt.get(r.id)! - startedAt.get(r.id)!);
  const note = `${BULK ? 'the burst started with POST /runs/batch (100 runs a request), the loop with POST /runs' : 'every run started with its own POST /runs'}; in the loop, start to RunCompleted's occurredAt (the engine's clock, as bench:orchestrator measures): p50 ${pct(engineMs, 50)} ms, p95 ${pct(engineMs, 95)} ms`;
  await Promise.all([events.disconnect(), results.disconnect(), http.close()]);
  return {
    engine: 'keyflow',
    version: `keyflow ${versionOf('@keyflow/orchestrator')} (this tree), Kafka ${process.env.KEYFLOW_KAFKA_VERSION ?? '?'}`,
    layout: `1 orchestrator, ${workerPids.length} worker process${workerPids.length === 1 ? '' : 'es'}, Kafka${store.length ? '' : ' (its CPU unread: no pid files, set KEYFLOW_RUN_DIR)'} + schema registry`,
    durability:
      "Kafka: every step transition in a transaction, acks=all (the stack: one broker, replication 1, the broker's default flush: the page cache)",
    burst,
    load,
    cpu: used,
    verified,
    note,
    loadAvgBefore,
  };
}

runEngine('keyflow', bench);
