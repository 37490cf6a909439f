import Redis from 'ioredis';
import type { TaskCompleted } from '@keyflow/schemas';
import { eventually, OwnRedisServer, REDIS_NO_PERSISTENCE_ARGS } from '@keyflow/testing';
import { WorkerHarness } from './support';

jest.setTimeout(120_000);

const TYPE = 'limited.charge';

/** What the `limited.charge` handler saw when it started: handlers running across workers, and for its customer. */
type Seen = { running: number; keyRunning: number; worker: string };

const seen = (h: WorkerHarness): Seen[] =>
  h.results.items
    .filter((r) => r.event === 'TaskCompleted')
    .map((r) => JSON.parse((r.value as TaskCompleted).output) as Seen);

/** The value of a worker's metric line `<name>{task_type="limited.charge"}`, 0 when absent. */
async function metricOf(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const type = TYPE.replace(/\./g, '\\.');
  const m = new RegExp(`^keyflow_${name}\\{[^}]*task_type="${type}"[^}]*\\} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}

describe('flow control across two worker processes', () => {
  const h = new WorkerHarness('flow');
  const LIMIT = 3;
  const counters = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6390');
  const counter = `flow-test-${process.pid}-${Date.now()}`;
  beforeAll(async () => {
    await h.setup([TYPE]);
    const env = {
      WORKER_FLOW_LIMITS: JSON.stringify({
        [TYPE]: { concurrency: LIMIT, perKey: 1, keyField: 'customerId' },
      }),
      WORKER_MAX_IN_FLIGHT: '64',
      WORKER_MAX_IN_FLIGHT_PER_PARTITION: '32',
      WORKER_FLOW_WAIT_REPORT_MS: '200',
    };
    await Promise.all([h.startWorker(env), h.startWorker(env)]);
  });
  afterAll(async () => {
    counters.disconnect();
    await h.teardown();
  });

  it('never runs more handlers at once than the concurrency limit across workers, nor more than perKey per customer, and fails none: the attempt timeout starts at admission, and a task that waited reports it (TaskWaiting) up to its admission', async () => {
    // 30 commands of 6 customers on 30 Kafka keys (all dispatched at once); 10 rounds of 3 x 150 ms take at least
    // 1.5 s, three times the attempt timeout: a timeout counting the wait would fail the later ones.
    const commands = Array.from({ length: 30 }, (_, i) =>
      h.command(
        TYPE,
        `c${i}`,
        { counter, customerId: `cust-${i % 6}`, ms: 150 },
        { timeoutMs: 500, maxAttempts: 1 },
      ),
    );
    await h.send(commands);
    const results = await h.results.wait(commands.length, 60_000);
    expect(results.map((r) => r.event)).toEqual(commands.map(() => 'TaskCompleted'));
    const s = seen(h);
    expect(Math.max(...s.map((x) => x.running))).toBeLessThanOrEqual(LIMIT);
    expect(Math.max(...s.map((x) => x.running))).toBeGreaterThan(1); // they did run side by side
    expect(Math.max(...s.map((x) => x.keyRunning))).toBe(1);
    expect(new Set(s.map((x) => x.worker)).size).toBe(2); // both workers took part
    const runs = Object.values(await counters.hgetall(`${counter}:runs`));
    expect(runs).toEqual(commands.map(() => '1'));
    // The tasks that waited reported it on task.results (for the orchestrator's step deadline), each ending with
    // one admission report (a task admitted at once sends none).
    const waits = h.waits.items;
    const waited = new Set(waits.map((w) => w.runId));
    expect(waited.size).toBeGreaterThan(0);
    for (const runId of waited) {
      const mine = waits.filter((w) => w.runId === runId);
      expect(mine.filter((w) => w.admitted)).toHaveLength(1);
      expect(mine.filter((w) => !w.admitted).length).toBeGreaterThanOrEqual(1);
      expect(mine.every((w) => w.reason === 'FLOW_LIMIT' && w.attempt === 1)).toBe(true);
    }
  });
});

describe('flow control with its limit store unreachable', () => {
  const h = new WorkerHarness('flow-outage');
  const counters = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6390');
  const counter = `flow-outage-${process.pid}-${Date.now()}`;
  let store: OwnRedisServer;
  let url: string;
  beforeAll(async () => {
    await h.setup([TYPE]);
    store = await OwnRedisServer.start(REDIS_NO_PERSISTENCE_ARGS);
    const w = await h.startWorker({
      WORKER_FLOW_LIMITS: JSON.stringify({ [TYPE]: { concurrency: 2, ratePerSec: 20 } }),
      WORKER_FLOW_REDIS_URL: store.url,
    });
    url = await w.ready;
  });
  afterAll(async () => {
    counters.disconnect();
    await h.teardown();
    await store.stop().catch(() => undefined);
    await store.remove().catch(() => undefined);
  });

  it('keeps tasks waiting while the store is away (none runs, none fails, none times out), then runs each once when it is back', async () => {
    await store.stop();
    const commands = Array.from({ length: 6 }, (_, i) =>
      h.command(TYPE, `o${i}`, { counter, customerId: `c${i}`, ms: 20 }, { timeoutMs: 300, maxAttempts: 1 }),
    );
    await h.send(commands);
    await eventually(
      'all six waiting for their admission',
      async () => (await metricOf(url, 'worker_flow_waiting')) === 6,
      {
        timeoutMs: 30_000,
      },
    );
    // Several failed tries (with backoff: well over the attempt timeout) while they wait.
    await eventually(
      'the store to be asked and not answer five times',
      async () => (await metricOf(url, 'worker_flow_store_errors_total')) >= 5,
      {
        timeoutMs: 30_000,
      },
    );
    expect(h.results.items).toHaveLength(0);
    expect(await counters.hlen(`${counter}:runs`)).toBe(0);
    await store.start();
    const results = await h.results.wait(commands.length, 60_000);
    expect(results.map((r) => r.event)).toEqual(commands.map(() => 'TaskCompleted'));
    expect(Object.values(await counters.hgetall(`${counter}:runs`))).toEqual(commands.map(() => '1'));
    expect(await metricOf(url, 'worker_flow_waiting')).toBe(0);
    expect(await metricOf(url, 'worker_flow_admitted_total')).toBe(6);
  });
});
