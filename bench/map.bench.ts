import { parseArgs } from 'node:util';
import { Kafka, logLevel, type Consumer } from 'kafkajs';
import { EventCodec } from '@keyflow/contracts';
import {
  PendingRuns,
  reduce,
  snapshotParts,
  workflow,
  type CommandSpec,
  type RunState,
  type WorkflowInput,
} from '@keyflow/workflow';
import { echo } from '@keyflow/testing';
import { spawnService, benchWait, benchTopics, positiveInt, readLifecycle, runBench } from './support';
import { eventually } from '@keyflow/testing';
import { Topic } from '@keyflow/schemas';

/**
 * Map fan-out cost per item, on the reducer as the engine drives it (issue "Throughput at ETL scale", target 3):
 * one run with one map step of N items, results applied in batches of `--batch` (what one fetch of task.results
 * carries) through `PendingRuns` (one copy of the run per batch, inputs applied in place), plus the run's snapshot
 * text once per batch as the engine writes it (`snapshotParts`: the core and the item segments the batch changed).
 * Printed per N: total ms, us per item, the ratio of us per item to that at the smallest N (target: <= 2 at 100,000
 * against 1,000), and the bytes of the last batch's snapshot records.
 * `--pure` also times the pure `reduce` (a copy of the whole run per input, what the engine did before) up to
 * `--pure-max` items: that column is the old, quadratic figure.
 * `--e2e` measures end to end instead, on the local stack: an orchestrator and one worker process (the `echo`
 * handler), one run of the built-in `fan-out` workflow (64 items in flight) per size, from the POST to the map's
 * StepCompleted (its fan-in) on wf.events; printed per item and against the smallest size.
 *   npm run bench:map -- [--sizes 1000,10000,100000] [--batch 200] [--concurrency 256] [--pure]
 *   eval "$(infra/local/stack.sh up)" && npm run bench:map -- --e2e --sizes 1000,10000,100000
 */
const { values: args } = parseArgs({
  options: {
    sizes: { type: 'string', default: '1000,10000,100000' },
    batch: { type: 'string', default: '200' },
    concurrency: { type: 'string', default: '256' },
    pure: { type: 'boolean', default: false },
    e2e: { type: 'boolean', default: false },
    'pure-max': { type: 'string', default: '4000' },
  },
});
// Checked before anything starts: a size of -5 or `x` ran a fan-out of nothing and printed a negative cost per item.
const SIZES = args.sizes.split(',').map((v) => positiveInt('--sizes', v.trim()));
const BATCH = positiveInt('--batch', args.batch);
const CONCURRENCY = positiveInt('--concurrency', args.concurrency);
const PURE_MAX = positiveInt('--pure-max', args['pure-max']);

const def = () =>
  workflow('fan', 1)
    .task('split', { type: 'split' })
    .map('each', {
      type: 'load',
      items: (c) => (c.outputs.split as { items: number[] }).items,
      input: (item) => ({ chunk: item }),
      concurrency: CONCURRENCY,
    })
    .task('report', { type: 'report', input: (c) => ({ n: (c.outputs.each as unknown[]).length }) })
    .build();

let eventIds = 0;
const result = (runId: string, c: CommandSpec, output: unknown): WorkflowInput => ({
  eventId: `e${++eventIds}`,
  at: Date.now(),
  runId,
  kind: 'task-completed',
  stepId: c.stepId,
  attempt: c.attempt,
  output,
});

/** Drives one run of an `n`-item map to completion; `apply` applies one batch and returns its commands. */
function drive(
  n: number,
  applyBatch: (inputs: WorkflowInput[]) => CommandSpec[],
): { ms: number; snapshotBytes: number } {
  const runId = `run-${n}`;
  const items = Array.from({ length: n }, (_, i) => i);
  let outstanding = applyBatch([
    {
      eventId: `e${++eventIds}`,
      at: Date.now(),
      runId,
      kind: 'start',
      workflow: 'fan',
      version: 1,
      businessKey: 'b',
      input: {},
    },
  ]);
  // The split step's result carries the items; the clock starts with the fan-out.
  const t0 = process.hrtime.bigint();
  outstanding = applyBatch([result(runId, outstanding[0], { items })]);
  while (outstanding.length) {
    const batch = outstanding.splice(0, BATCH);
    outstanding.push(...applyBatch(batch.map((c) => result(runId, c, { rows: 1 }))));
    if (outstanding.length === 1 && outstanding[0].stepId === 'report') break;
  }
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, snapshotBytes: lastSnapshotBytes };
}

let lastSnapshotBytes = 0;

/** The engine's path: a PendingRuns per batch over the committed state, one snapshot per changed run per batch. */
function engineWay(n: number) {
  const d = def();
  let committed: RunState | undefined;
  return drive(n, (inputs) => {
    const pending = new PendingRuns(() => committed);
    const commands = inputs.flatMap((i) => pending.apply(d, i).commands);
    for (const state of pending.changed().values()) {
      const parts = snapshotParts(state, committed);
      lastSnapshotBytes = parts.core.length + parts.segments.reduce((n, p) => n + p.text.length, 0);
    }
    committed = pending.changed().get(inputs[0].runId) ?? committed;
    return commands;
  });
}

/** Before: the pure reducer per input (a copy of the run each) and a whole snapshot per input. */
function pureWay(n: number) {
  const d = def();
  let state: RunState | undefined;
  return drive(n, (inputs) =>
    inputs.flatMap((i) => {
      const r = reduce(d, state, i);
      state = r.state;
      lastSnapshotBytes = JSON.stringify(state).length;
      return r.commands;
    }),
  );
}

function main() {
  const rows: Array<Record<string, string | number>> = [];
  let base: number | undefined;
  let pureBase: number | undefined;
  engineWay(Math.min(...SIZES)); // warm-up
  for (const n of SIZES) {
    const r = engineWay(n);
    const perItem = (r.ms * 1000) / n;
    base ??= perItem;
    const row: Record<string, string | number> = {
      items: n,
      'engine way ms': Math.round(r.ms),
      'us/item': Number(perItem.toFixed(1)),
      'vs smallest': Number((perItem / base).toFixed(2)),
      'last snapshot KiB': Math.round(r.snapshotBytes / 1024),
    };
    if (args.pure && n <= PURE_MAX) {
      const p = pureWay(n);
      const pPer = (p.ms * 1000) / n;
      pureBase ??= pPer;
      row['pure reduce us/item (before)'] = Number(pPer.toFixed(1));
      row['pure vs smallest'] = Number((pPer / pureBase).toFixed(2));
    }
    rows.push(row);
  }
  console.table(rows);
  console.log(
    JSON.stringify({ bench: 'map', batch: BATCH, concurrency: CONCURRENCY, node: process.version, rows }),
  );
}

/** End to end: one `fan-out` run per size through a real orchestrator and worker. */
async function e2e() {
  const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
  const registryUrl = process.env.SCHEMA_REGISTRY_URL ?? '';
  if (!brokers.length || !registryUrl)
    throw new Error('KAFKA_BROKERS and SCHEMA_REGISTRY_URL must be set: eval "$(infra/local/stack.sh up)"');
  const prefix = benchTopics(`bench-map-${Date.now()}.`);
  const env = {
    KEYFLOW_TOPIC_PREFIX: prefix,
    ORCHESTRATOR_GROUP_ID: `${prefix}orch`,
    WORKER_GROUP_ID: `${prefix}workers`,
  };
  // Every service started is stopped (and awaited) however this ends, before runBench deletes the topics under them.
  const services: Array<ReturnType<typeof spawnService>> = [];
  let consumer: Consumer | undefined;
  const rows: Array<Record<string, number>> = [];
  try {
    const orch = spawnService('examples/test-workloads/src/orchestrator.ts', env, 'orchestrator ready');
    services.push(orch);
    const url = await orch.ready;
    const worker = spawnService(
      'examples/test-workloads/src/worker.ts',
      { ...env, WORKER_TASK_TYPES: echo.type },
      'worker ready',
    );
    services.push(worker);
    await worker.ready;
    const codec = new EventCodec({ registryUrl, topicPrefix: prefix });
    await codec.registerTopics([Topic.WF_EVENTS]);
    const kafka = new Kafka({ brokers, clientId: 'bench-map', logLevel: logLevel.NOTHING });
    /** When each run's fan-in (StepCompleted of `each`) was read, by run id. */
    const fannedIn = new Map<string, number>();
    consumer = await readLifecycle(kafka, codec, `${prefix}events`, (d) => {
      if (d.event === 'StepCompleted' && d.value.stepId === 'each') fannedIn.set(d.value.runId, Date.now());
    });
    let base: number | undefined;
    for (const n of SIZES) {
      const t0 = Date.now();
      const res = await fetch(`${url}/runs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ workflow: 'fan-out', input: { count: n } }),
      });
      if (res.status !== 202) throw new Error(`POST /runs answered ${res.status}: ${await res.text()}`);
      const { runId } = (await res.json()) as { runId: string };
      await eventually(
        `the fan-in of ${n} items`,
        () => fannedIn.has(runId),
        benchWait(3_600_000, `the fan-in of ${n} items`, [orch, worker]),
      );
      const ms = fannedIn.get(runId)! - t0; // when it was read, not when the poll saw it
      const perItem = (ms * 1000) / n;
      base ??= perItem;
      rows.push({
        items: n,
        'end to end ms': ms,
        'us/item': Math.round(perItem),
        'vs smallest': Number((perItem / base).toFixed(2)),
        'orchestrator peak RSS MiB': Math.round(orch.peakRssMb()),
      });
    }
  } finally {
    await consumer?.disconnect().catch(() => undefined);
    await Promise.all(services.map((s) => s.stop()));
  }
  console.table(rows);
  console.log(JSON.stringify({ bench: 'map-e2e', node: process.version, rows }));
}

// runBench deletes the run's topics afterwards (left in place, they slowed every later bench on the broker).
if (args.e2e) runBench(e2e);
else main();
