import Redis from 'ioredis';
import { createLogger, createMetricsRegistry } from '@keyflow/observability';
import { flowKeys } from '@keyflow/ops';
import { eventually } from '@keyflow/testing';
import { FlowLimiter, workerMetrics, type FlowLimits, type FlowPermit } from '@keyflow/task-runtime';

jest.setTimeout(60_000);

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6390';
const TYPE = 'charge';

/** Limiters as separate workers would have them: each its own connection, all on the shared Redis and prefix. */
describe('FlowLimiter across limiters (one per worker) on one Redis', () => {
  const prefix = `flow-limiter-${process.pid}-${Date.now()}:`;
  const made: Array<{ limiter: FlowLimiter; redis: Redis }> = [];
  const queue = new Redis(REDIS_URL);
  const limiter = (limits: FlowLimits, leaseMs = 30_000) => {
    const redis = new Redis(REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    const m = workerMetrics(createMetricsRegistry('workers'));
    const l = new FlowLimiter({
      redis,
      limits,
      topicPrefix: prefix,
      leaseMs,
      logger: createLogger('workers', { level: 'error' }),
      metrics: { waiting: m.flowWaiting, admitted: m.flowAdmitted, storeErrors: m.flowStoreErrors },
    });
    made.push({ limiter: l, redis });
    return l;
  };
  const inLine = () => queue.zcard(flowKeys(prefix).queue(TYPE));
  afterAll(() => {
    for (const { limiter: l, redis } of made) {
      l.close();
      redis.disconnect();
    }
    queue.disconnect();
  });

  it('admits waiters of different workers in the order they came, one permit at a time', async () => {
    const limits = { [TYPE]: { concurrency: 1 } };
    const [a, b] = [limiter(limits), limiter(limits)];
    const first = await a.admit(TYPE, 'k0');
    const order: string[] = [];
    const permits: Promise<FlowPermit>[] = [];
    // Alternating workers; each waiter is in the cluster-wide line before the next one comes.
    for (const [i, l] of [b, a, b, a].entries()) {
      permits.push(l.admit(TYPE, `k${i + 1}`).then((p) => (order.push(p.key), p)));
      await eventually(`waiter ${i + 1} in line`, async () => (await inLine()) === i + 1);
    }
    a.release(first);
    for (let i = 0; i < permits.length; i++) {
      const p = await permits[i];
      expect(order).toHaveLength(i + 1); // never two at once
      (p.key === 'k1' || p.key === 'k3' ? b : a).release(p);
    }
    expect(order).toEqual(['k1', 'k2', 'k3', 'k4']);
    // The limits are in the store for the ops console (GET /ops/overview reads them there).
    expect(JSON.parse((await queue.hget(flowKeys(prefix).limits, TYPE))!)).toEqual({
      concurrency: 1,
      perKey: 0,
      ratePerSec: 0,
    });
  });

  it("gives a crashed worker's permit back after its lease, and its waiters stop holding the line", async () => {
    const type = { [TYPE]: { concurrency: 1 } };
    const crashed = limiter(type, 1_000);
    const held = await crashed.admit(TYPE, 'gone');
    const cancelled = new AbortController();
    const stuck = crashed.admit(TYPE, 'gone-waiter', cancelled.signal);
    await eventually('the crashed worker waiter in line', async () => (await inLine()) === 1);
    crashed.close(); // stops refreshing its permit and renewing its waiter: as a crash would
    const other = limiter(type);
    const p = await other.admit(TYPE, 'next');
    expect(p.key).toBe('next');
    other.release(p);
    cancelled.abort(new Error('test over'));
    await expect(stuck).rejects.toThrow('test over');
    expect(held.key).toBe('gone');
  });
});
