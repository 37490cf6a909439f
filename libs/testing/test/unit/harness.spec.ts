import { infraFromEnv, InfraUnavailableError, Collector, eventually, AwaitTimeoutError } from '../../src';

describe('the test harness', () => {
  it('takes endpoints from the environment only when all three are set', () => {
    const full = {
      KAFKA_BROKERS: 'a:1, b:2',
      SCHEMA_REGISTRY_URL: 'http://r/apis/ccompat/v7/',
      REDIS_URL: 'redis://x:6379',
    };
    expect(infraFromEnv(full)).toEqual({
      kafkaBrokers: ['a:1', 'b:2'],
      schemaRegistryUrl: 'http://r/apis/ccompat/v7',
      redisUrl: 'redis://x:6379',
      source: 'env',
    });
    expect(infraFromEnv({ ...full, REDIS_URL: '' })).toBeUndefined();
    expect(infraFromEnv({ KAFKA_BROKERS: 'a:1' })).toBeUndefined();
  });

  it('tells the user how to start the local stack when nothing is found', () => {
    const err = new InfraUnavailableError('missing KAFKA_BROKERS');
    expect(err.message).toContain('infra/local/stack.sh up');
    expect(err.message).toContain('missing KAFKA_BROKERS');
    expect(err.retryable).toBe(false);
  });

  it('a collector resolves when the expected count arrives, and times out naming what it waited for', async () => {
    const c = new Collector<number>();
    const waiting = c.wait(2, 1_000);
    c.push(1);
    c.push(2);
    await expect(waiting).resolves.toEqual([1, 2]);
    await expect(c.wait(3, 20, '3 numbers')).rejects.toThrow(/3 numbers/);
  });

  it('eventually returns the first accepted value, or fails with the last one seen', async () => {
    let n = 0;
    await expect(eventually('n >= 3', () => ++n, { until: (v) => v >= 3, intervalMs: 1 })).resolves.toBe(3);
    await expect(
      eventually('never', () => 'nope', { until: () => false, timeoutMs: 20, intervalMs: 5 }),
    ).rejects.toBeInstanceOf(AwaitTimeoutError);
  });
});
