import { Command } from 'commander';
import Redis from 'ioredis';
import { Kafka, logLevel } from '@keyflow/kafka';
import { EventCodec, newMetadata } from '@keyflow/contracts';
import type { TaskCommand } from '@keyflow/schemas';
import { taskTopic, Topic } from '@keyflow/schemas';
import { idempotencyKeyOf } from '@keyflow/workflow';
import { eventually } from '@keyflow/testing';
import { benchWait, serviceOnlyEnv, spawnService, benchTopics, readResults, runBench } from './support';

/**
 * Flow-control benchmark: `--workers` worker processes (bench/flow/worker.ts) share the limit of the `charge` task
 * (WORKER_FLOW_LIMITS: `--concurrency` at once, `--per-key` per customer, `--rate` per second). Two phases of
 * `--tasks` commands each: short handlers (the rate binds), then long ones (the concurrency binds). Prints, from the
 * handlers' own start and end times, the observed maximum concurrency (cluster-wide and per customer), the maximum
 * handler starts in any 1 s window, and the tasks that failed. Figures, never a test.
 *   eval "$(infra/local/stack.sh up)" && npm run bench:flow -- --workers 4 --concurrency 5 --rate 50
 */
const opts = new Command()
  .option('--workers <n>', 'worker processes', '4')
  .option('--concurrency <n>', 'charge handlers at once, cluster-wide', '5')
  .option('--per-key <n>', 'charge handlers at once per customer', '1')
  .option('--rate <n>', 'charge handler starts per second, cluster-wide', '50')
  .option('--tasks <n>', 'commands per phase', '500')
  .option('--customers <n>', 'customers the commands are spread over', '40')
  .parse()
  .opts<{
    workers: string;
    concurrency: string;
    perKey: string;
    rate: string;
    tasks: string;
    customers: string;
  }>();

const TASK = 'charge';
const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
const registryUrl = process.env.SCHEMA_REGISTRY_URL ?? '';
if (!brokers.length || !registryUrl || !process.env.REDIS_URL)
  throw new Error(
    'KAFKA_BROKERS, SCHEMA_REGISTRY_URL and REDIS_URL must be set: eval "$(infra/local/stack.sh up)"',
  );

/** The largest number of [start, end) intervals open at once. */
function maxOverlap(calls: Array<{ start: number; end: number }>): number {
  const edges = calls.flatMap((c) => [
    [c.start, 1],
    [c.end, -1],
  ]);
  // An end at the same ms as a start comes first: the two did not overlap.
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let open = 0;
  let max = 0;
  for (const [, d] of edges) max = Math.max(max, (open += d));
  return max;
}

/** The most starts in any window [t, t + 1000 ms). */
function maxPerSecond(starts: number[]): number {
  const s = [...starts].sort((a, b) => a - b);
  let max = 0;
  for (let i = 0, j = 0; i < s.length; i++) {
    while (s[i] - s[j] >= 1000) j++;
    max = Math.max(max, i - j + 1);
  }
  return max;
}

function command(phase: string, i: number, ms: number): TaskCommand {
  const runId = `${phase}-${i}`;
  return {
    metadata: newMetadata('TaskCommand', { key: runId, correlationId: runId }),
    runId,
    workflow: 'bench-flow',
    workflowVersion: 1,
    stepId: TASK,
    taskType: TASK,
    attempt: 1,
    idempotencyKey: idempotencyKeyOf(runId, TASK),
    input: JSON.stringify({ customerId: `cust-${i % Number(opts.customers)}`, ms }),
    inputRef: null,
    compensates: null,
    timeoutMs: 1_000,
    maxAttempts: 1,
  };
}

async function main() {
  const prefix = benchTopics(`bench-flow-${Date.now()}.`);
  const list = `${prefix}calls`;
  const limits = {
    concurrency: Number(opts.concurrency),
    perKey: Number(opts.perKey),
    ratePerSec: Number(opts.rate),
  };
  const kafka = new Kafka({ brokers, clientId: 'bench-flow', logLevel: logLevel.NOTHING });
  const codec = new EventCodec({ registryUrl, topicPrefix: prefix });
  const redis = new Redis(process.env.REDIS_URL!);
  const env = {
    KEYFLOW_TOPIC_PREFIX: prefix,
    WORKER_TASK_TYPES: TASK,
    WORKER_FLOW_LIMITS: JSON.stringify({ [TASK]: { ...limits, keyField: 'customerId' } }),
    BENCH_FLOW_LIST: list,
    ...serviceOnlyEnv('WORKER'),
  };
  const workers = Array.from({ length: Number(opts.workers) }, () =>
    spawnService('bench/flow/worker.ts', env, 'worker ready'),
  );
  const results = { completed: 0, failed: 0, codes: new Map<string, number>() };
  try {
    await Promise.all(workers.map((w) => w.ready));
    await codec.registerTopics([taskTopic(TASK), Topic.TASK_RESULTS]);
    const consumer = await readResults(kafka, codec, `${prefix}reader`, (d) => {
      if (d.event === 'TaskCompleted') results.completed++;
      else {
        results.failed++;
        const code = (d.value as { error: { code: string | null } }).error.code ?? 'none';
        results.codes.set(code, (results.codes.get(code) ?? 0) + 1);
      }
    });
    const producer = kafka.producer({ idempotent: true });
    await producer.connect();
    console.log(
      `flow-control bench: ${opts.workers} workers, limit ${JSON.stringify(limits)} per customer over ${opts.customers} customers`,
    );
    let sent = 0;
    for (const [phase, ms] of [
      ['short', 20],
      ['long', 200],
    ] as const) {
      const n = Number(opts.tasks);
      const t0 = Date.now();
      const commands = Array.from({ length: n }, (_, i) => command(phase, i, ms));
      await producer.send({
        topic: codec.physical(taskTopic(TASK)),
        acks: -1,
        messages: commands.map((c) => ({
          key: c.metadata.key,
          value: codec.encode(taskTopic(TASK), 'TaskCommand', c),
        })),
      });
      sent += n;
      await eventually(
        `${sent} results`,
        () => results.completed + results.failed >= sent,
        benchWait(600_000, 'results', workers),
      );
      const calls = (await redis.lrange(list, 0, -1)).slice(sent - n).map((l) => {
        const [start, end, customer] = l.split(' ');
        return { start: Number(start), end: Number(end), customer };
      });
      const byCustomer = new Map<string, typeof calls>();
      for (const c of calls) byCustomer.set(c.customer, [...(byCustomer.get(c.customer) ?? []), c]);
      const perKey = Math.max(...[...byCustomer.values()].map(maxOverlap));
      const seconds = (Date.now() - t0) / 1000;
      console.log(
        `phase ${phase} (handler ${ms} ms): ${calls.length} calls in ${seconds.toFixed(1)} s (${(calls.length / seconds).toFixed(1)}/s overall); ` +
          `max concurrency ${maxOverlap(calls)} (limit ${limits.concurrency}), max per customer ${perKey} (limit ${limits.perKey}), ` +
          `max starts in a 1 s window ${maxPerSecond(calls.map((c) => c.start))} (limit ${limits.ratePerSec})`,
      );
    }
    console.log(
      `tasks completed ${results.completed}, failed ${results.failed}${results.failed ? ` (${[...results.codes].map(([c, n]) => `${c}: ${n}`).join(', ')})` : ''}; calls recorded ${await redis.llen(list)}`,
    );
    await consumer.disconnect();
    await producer.disconnect();
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
    await redis.del(list);
    redis.disconnect();
  }
}

runBench(main);
