import { eventually, OwnRedisServer, REDIS_AOF_ARGS } from '@keyflow/testing';
import { OrchestratorHarness } from './support';

jest.setTimeout(180_000);

interface Health {
  status: string;
  degraded: Array<{ code: string; error: string }>;
}

/**
 * The API's Idempotency-Keys and webhook delivery ids live in Redis: evicted at maxmemory, a retried request would
 * start a second run. An evicting maxmemory-policy is shown, not silent.
 */
describe('the request key store (Redis) of the API', () => {
  const h = new OrchestratorHarness('request-keys-evict');
  let redis: OwnRedisServer;
  afterAll(async () => {
    await h.teardown();
    await redis?.remove();
  }, 60_000);

  it('an evicting maxmemory-policy degrades /health with IDEMPOTENCY_STORE_EVICTS naming the policy', async () => {
    redis = await OwnRedisServer.start([
      ...REDIS_AOF_ARGS,
      '--maxmemory',
      '64mb',
      '--maxmemory-policy',
      'volatile-lru',
    ]);
    const url = await (await h.startOrchestrator({ REDIS_URL: redis.url })).ready;
    const health = await eventually(
      'degraded',
      async () => (await (await fetch(`${url}/health`)).json()) as Health,
      { until: (b) => b.degraded.some((d) => d.code === 'IDEMPOTENCY_STORE_EVICTS'), timeoutMs: 30_000 },
    );
    expect(health.status).toBe('degraded');
    expect(health.degraded.find((d) => d.code === 'IDEMPOTENCY_STORE_EVICTS')!.error).toContain(
      'volatile-lru',
    );
  });
});
