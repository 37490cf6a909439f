import Redis from 'ioredis';
import { eventually, OwnRedisServer, REDIS_AOF_ARGS, REDIS_NO_PERSISTENCE_ARGS } from '@keyflow/testing';
import { WorkerHarness } from './support';

jest.setTimeout(120_000);

type Health = {
  status: string;
  idempotency: {
    durable: boolean | null;
    reason: string;
    eviction?: { policy: string; evicts: boolean; allowed: boolean; reason: string };
  };
  failed: Array<{ component: string }>;
  degraded: Array<{ code: string; error: string }>;
};

describe("a worker's /health", () => {
  const h = new WorkerHarness('worker-health');
  const servers: OwnRedisServer[] = [];
  beforeAll(() => h.setup(['seq']));
  afterAll(async () => {
    await h.teardown();
    await Promise.all(servers.map((s) => s.remove()));
  });

  const healthOf = async (url: string) =>
    eventually(
      'the persistence check to have run',
      async () => {
        const r = await fetch(`${url}/health`);
        return { code: r.status, body: (await r.json()) as Health };
      },
      { until: (x) => x.body.idempotency.durable !== null, timeoutMs: 20_000 },
    );

  it('on a Redis that persists nothing: warns at startup, /health says durable: false with the reason, and stays 200', async () => {
    const redis = await OwnRedisServer.start(REDIS_NO_PERSISTENCE_ARGS);
    servers.push(redis);
    const w = await h.startWorker({ REDIS_URL: redis.url });
    const { code, body } = await healthOf(await w.ready);
    expect(code).toBe(200);
    expect(body.status).toBe('ok');
    expect(body.idempotency.durable).toBe(false);
    expect(body.idempotency.reason).toMatch(/AOF is off and RDB snapshots are off/);
    expect(body.failed).toEqual([]);
    const warning = w.logs.find((l) => l.includes('idempotency store (Redis) persists nothing'));
    expect(warning && JSON.parse(warning).level).toBe(40); // pino's warn
  });

  it('on a Redis with RDB snapshots only: /health says durable: false and snapshotIntervalS, the longest interval of its schedule', async () => {
    const redis = await OwnRedisServer.start(['--appendonly', 'no', '--save', '3600 1 300 100']);
    servers.push(redis);
    const w = await h.startWorker({ REDIS_URL: redis.url });
    const { code, body } = await healthOf(await w.ready);
    expect(code).toBe(200);
    expect(body.idempotency).toMatchObject({ durable: false, aof: false, snapshotIntervalS: 3600 });
    expect(body.idempotency.reason).toMatch(/RDB snapshots only/);
  });

  it('on a Redis with AOF (as infra/local/stack.sh runs it): /health says durable: true, and no warning', async () => {
    const redis = await OwnRedisServer.start(REDIS_AOF_ARGS);
    servers.push(redis);
    const w = await h.startWorker({ REDIS_URL: redis.url });
    const { code, body } = await healthOf(await w.ready);
    expect(code).toBe(200);
    expect(body.idempotency).toMatchObject({ durable: true, aof: true });
    expect(w.logs.some((l) => l.includes('persists nothing'))).toBe(false);
  });

  it('on a Redis that evicts keys at its limit (maxmemory-policy volatile-lru): the worker refuses to run, naming the policy, and exits 1', async () => {
    const redis = await OwnRedisServer.start([
      ...REDIS_AOF_ARGS,
      '--maxmemory',
      '64mb',
      '--maxmemory-policy',
      'volatile-lru',
    ]);
    servers.push(redis);
    // The check runs before any task is consumed; the worker never gets ready, and its fatal log names the code.
    const refused = h.startWorker({ REDIS_URL: redis.url, KEYFLOW_FATAL_EXIT_DELAY_MS: '500' });
    await expect(refused).rejects.toThrow(
      /worker exited with 1 before ready[\s\S]*maxmemory-policy volatile-lru/,
    );
    await expect(refused).rejects.toThrow(/"code":"IDEMPOTENCY_STORE_EVICTS"/);
  });

  it('with WORKER_IDEMPOTENCY_ALLOW_EVICTION=true the same Redis is accepted, and /health names the policy', async () => {
    const redis = await OwnRedisServer.start([...REDIS_AOF_ARGS, '--maxmemory-policy', 'allkeys-lru']);
    servers.push(redis);
    const w = await h.startWorker({ REDIS_URL: redis.url, WORKER_IDEMPOTENCY_ALLOW_EVICTION: 'true' });
    const { code, body } = await eventually(
      'eviction in /health',
      async () => {
        const r = await fetch(`${await w.ready}/health`);
        return { code: r.status, body: (await r.json()) as Health };
      },
      { until: (x) => x.body.idempotency.eviction !== undefined, timeoutMs: 20_000 },
    );
    expect(code).toBe(200);
    expect(body.idempotency.eviction).toMatchObject({ policy: 'allkeys-lru', evicts: true, allowed: true });
    expect(body.idempotency.eviction!.reason).toMatch(/WORKER_IDEMPOTENCY_ALLOW_EVICTION/);
  });

  it('a noeviction Redis at its memory limit: /health is degraded with IDEMPOTENCY_STORE_FULL while it refuses writes, and recovers', async () => {
    const redis = await OwnRedisServer.start([
      ...REDIS_AOF_ARGS,
      '--maxmemory',
      '8mb',
      '--maxmemory-policy',
      'noeviction',
    ]);
    servers.push(redis);
    // A group of its own: the partitions are this worker's, not shared with the workers of the tests before.
    const w = await h.startWorker({ REDIS_URL: redis.url, WORKER_GROUP_ID: h.ns.groupId('full') });
    const url = await w.ready;
    const health = async () => {
      const r = await fetch(`${url}/health`);
      return { code: r.status, body: (await r.json()) as Health };
    };
    const filler = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    const chunk = 'x'.repeat(8 * 1024);
    let n = 0;
    for (; n < 20_000; n++)
      if (
        await filler.set(`filler-${n}`, chunk).then(
          () => false,
          (e: Error) => /OOM/.test(e.message),
        )
      )
        break;
    const cmd = h.command('seq', `full-${h.prefix}`, { entity: `full-${h.prefix}`, seq: 1 });
    await h.send([cmd]);
    const degraded = await eventually('degraded', health, {
      until: (x) => x.body.degraded.some((d) => d.code === 'IDEMPOTENCY_STORE_FULL'),
      timeoutMs: 30_000,
    });
    expect(degraded.code).toBe(200);
    expect(degraded.body.status).toBe('degraded');
    expect(degraded.body.degraded.find((d) => d.code === 'IDEMPOTENCY_STORE_FULL')!.error).toMatch(
      /maxmemory/,
    );
    await filler.flushdb();
    filler.disconnect();
    await eventually(
      'result',
      () => h.results.items.find((r) => r.value.idempotencyKey === cmd.idempotencyKey),
      {
        timeoutMs: 30_000,
      },
    );
    await eventually('recovered', health, { until: (x) => x.body.status === 'ok', timeoutMs: 30_000 });
  });

  it('a task consumer that crashes for good (the broker refuses its session timeout) turns /health 503 naming it, and the process exits 1', async () => {
    // Above the broker's group.max.session.timeout.ms (30 min by default): JoinGroup answers INVALID_SESSION_TIMEOUT,
    // which kafkajs does not retry.
    const w = await h.startWorker({
      WORKER_SESSION_TIMEOUT_MS: String(31 * 60_000),
      KEYFLOW_FATAL_EXIT_DELAY_MS: '15000',
    });
    const r = await fetch(`${await w.ready}/health`);
    expect(r.status).toBe(503);
    const body = (await r.json()) as Health;
    expect(body.status).toBe('unhealthy');
    expect(body.failed.map((f) => f.component)).toEqual(['task consumer']);
    await expect(w.exited).resolves.toBe(1);
  });
});
