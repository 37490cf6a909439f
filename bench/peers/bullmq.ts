import { randomUUID } from 'node:crypto';
import { loadavg } from 'node:os';
import { FlowProducer, QueueEvents, Worker, type Job } from 'bullmq';
import IORedis from 'ioredis';
import {
  BULK,
  coalesced,
  cpuParts,
  drive,
  runEngine,
  stepInput,
  verify,
  versionOf,
  type Started,
} from './common';
import { countStep, forkRole, mergedCounts, serveRole } from './host';

/**
 * BullMQ: the three steps as a flow (FlowProducer) of three jobs on one queue, children first: the run's root job
 * is step 3, its child step 2, whose child is step 1; each parent reads its child's return value with
 * `job.getChildrenValues()`. Two worker processes (keyflow runs two), each a `Worker` at its default concurrency (1).
 * The client adds the flows started together with one `FlowProducer.addBulk`, a flow started alone with `add`, and
 * awaits each root job by its completion event (QueueEvents).
 * Redis: the stack's (REDIS_URL), on an empty logical database, keys under a fresh prefix deleted at the end.
 */
const QUEUE = 'steps';
const url = process.env.REDIS_URL ?? '';

type StepData = { runId: string; k: 1 | 2 | 3; input?: unknown };

async function processStep(job: Job<StepData>) {
  const { runId, k } = job.data;
  countStep(runId, k);
  if (k === 1) return stepInput(1, job.data.input);
  const [previous] = Object.values(await job.getChildrenValues());
  return stepInput(k, previous);
}

function workerRole() {
  let worker: Worker | undefined;
  serveRole(
    async () => {
      worker = new Worker<StepData>(QUEUE, processStep, {
        connection: { url: process.env.PEER_REDIS_URL!, maxRetriesPerRequest: null },
        prefix: process.env.PEER_PREFIX!,
      });
      await worker.waitUntilReady();
    },
    async () => void (await worker?.close()),
  );
}

/** The first of logical databases 1-15 holding no key, as a URL (the stack's own tests use 0). */
async function freshDb(): Promise<string> {
  for (let db = 1; db < 16; db++) {
    const r = new IORedis(url, { db });
    const size = await r.dbsize();
    r.disconnect();
    if (size === 0) return `${url.replace(/\/\d*$/, '')}/${db}`;
  }
  throw new Error(`no empty logical database on ${url}`);
}

async function bench() {
  if (!url) throw new Error('REDIS_URL is not set: eval "$(infra/local/stack.sh env)"');
  const redisUrl = await freshDb();
  const prefix = `bench-peers-${randomUUID().slice(0, 8)}`;
  const admin = new IORedis(redisUrl);
  const info = await admin.info('server');
  const redisPid = Number(/process_id:(\d+)/.exec(info)?.[1]);
  const conf = async (k: string) => ((await admin.config('GET', k)) as string[])[1];
  const [save, aof, fsync] = [await conf('save'), await conf('appendonly'), await conf('appendfsync')];
  const workers = [0, 1].map(() =>
    forkRole(__filename, { PEER_ROLE: 'worker', PEER_REDIS_URL: redisUrl, PEER_PREFIX: prefix }),
  );
  await Promise.all(workers.map((w) => w.ready));
  const connection = { url: redisUrl, maxRetriesPerRequest: null };
  const flow = new FlowProducer({ connection, prefix });
  flow.setMaxListeners(0);
  // From the stream's start (the queue is new): with the default ('$', from its first read on) the completions of
  // the first runs were lost now and then, before that first read was sent.
  const events = new QueueEvents(QUEUE, { connection, prefix, lastEventId: '0-0' });
  await events.waitUntilReady();
  // The root job's completion is its run's: read from the queue's events (QueueEvents, as the docs show), its return
  // value the run's output.
  const completions = new Map<string, number>();
  const finished = new Map<string, unknown>();
  const waiting = new Map<string, (output: unknown) => void>();
  events.on('completed', ({ jobId, returnvalue }) => {
    completions.set(jobId, (completions.get(jobId) ?? 0) + 1);
    const out: unknown = typeof returnvalue === 'string' ? JSON.parse(returnvalue) : returnvalue;
    finished.set(jobId, out);
    waiting.get(jobId)?.(out);
  });
  const rootIds = new Map<string, string>();
  type FlowNode = Parameters<FlowProducer['add']>[0];
  // Flows added in one turn go in one FlowProducer.addBulk (one Redis transaction), as keyflow's client batches its
  // starts (keyflow.ts); a flow added alone goes in FlowProducer.add.
  const add = coalesced<FlowNode, string>(
    async (f) => (await flow.add(f)).job.id!,
    async (fs) => (await flow.addBulk(fs)).map((n) => n.job.id!),
    1000,
  );
  const start = async (tag: string): Promise<Started> => {
    const runId = randomUUID();
    const node = (k: 1 | 2 | 3): FlowNode => ({
      name: `step${k}`,
      queueName: QUEUE,
      data: { runId, k, ...(k === 1 ? { input: { tag } } : {}) },
      children: k > 1 ? [node((k - 1) as 1 | 2)] : undefined,
    });
    const root = await add(node(3));
    rootIds.set(runId, root);
    const done = finished.has(root)
      ? Promise.resolve(finished.get(root))
      : new Promise<unknown>((r) => waiting.set(root, r));
    return { id: runId, tag, done };
  };
  const about = {
    engine: 'BullMQ (flows)',
    version: `bullmq ${versionOf('bullmq')}, Redis ${/redis_version:(\S+)/.exec(info)?.[1]}`,
    layout: `2 worker processes (concurrency 1 each), Redis; ${BULK ? 'the burst added with addBulk (100 flows a call)' : 'every flow added alone'}`,
    durability:
      aof === 'yes'
        ? `Redis append-only file, appendfsync ${fsync} (the stack's Redis; a crash may lose the last second of jobs)`
        : `none on disk: Redis with appendonly no, save "${save}"`,
  };
  try {
    const loadAvgBefore = loadavg();
    const { burst, load, runs, used } = await drive(start, () =>
      cpuParts(() => ({ workers: workers.map((w) => w.proc.pid!), store: [redisPid] })),
    );
    const executions = await mergedCounts(workers);
    const perRun = new Map([...rootIds].map(([run, job]) => [run, completions.get(job) ?? 0]));
    const verified = await verify(runs, executions, perRun);
    return { ...about, burst, load, cpu: used, verified, loadAvgBefore };
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
    await Promise.all([flow.close(), events.close()]);
    const keys = await admin.keys(`${prefix}:*`);
    for (let i = 0; i < keys.length; i += 1000) await admin.del(...keys.slice(i, i + 1000));
    admin.disconnect();
  }
}

if (process.env.PEER_ROLE === 'worker') workerRole();
else runEngine('BullMQ', bench);
