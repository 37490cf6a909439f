import { loadWorkerConfig, WorkerConfigError } from '../../src/config';

const base = {
  KAFKA_BROKERS: 'a:9092, b:9092',
  SCHEMA_REGISTRY_URL: 'http://r:8081/apis/ccompat/v7',
  REDIS_URL: 'redis://127.0.0.1:6379',
};

describe('worker configuration', () => {
  it('fills every default and splits lists', () => {
    const c = loadWorkerConfig(base);
    expect(c.brokers).toEqual(['a:9092', 'b:9092']);
    expect(c.WORKER_GROUP_ID).toBe('keyflow.workers');
    expect(c.taskTypes).toEqual([]);
    expect(c.WORKER_SESSION_TIMEOUT_MS).toBe(30_000);
  });

  it('derives the default group id from KEYFLOW_TOPIC_PREFIX; a set or blank WORKER_GROUP_ID behaves as given or unset', () => {
    expect(loadWorkerConfig({ ...base, KEYFLOW_TOPIC_PREFIX: 'acme.' }).WORKER_GROUP_ID).toBe(
      'acme.keyflow.workers',
    );
    expect(
      loadWorkerConfig({ ...base, KEYFLOW_TOPIC_PREFIX: 'acme.', WORKER_GROUP_ID: ' ' }).WORKER_GROUP_ID,
    ).toBe('acme.keyflow.workers');
    expect(
      loadWorkerConfig({ ...base, KEYFLOW_TOPIC_PREFIX: 'acme.', WORKER_GROUP_ID: 'mine' }).WORKER_GROUP_ID,
    ).toBe('mine');
  });

  it('reads WORKER_FLOW_LIMITS as limits by task type (none by default) and refuses one that is not JSON limits', () => {
    expect(loadWorkerConfig(base).WORKER_FLOW_LIMITS).toEqual({});
    const limits = { charge: { concurrency: 5, perKey: 1, keyField: 'customerId', ratePerSec: 50 } };
    expect(
      loadWorkerConfig({ ...base, WORKER_FLOW_LIMITS: JSON.stringify(limits) }).WORKER_FLOW_LIMITS,
    ).toEqual(limits);
    for (const bad of ['{', '{"charge":{"concurrency":-1}}', '{"charge":{"burst":2}}'])
      expect(() => loadWorkerConfig({ ...base, WORKER_FLOW_LIMITS: bad })).toThrow(/WORKER_FLOW_LIMITS/);
    expect(() => loadWorkerConfig({ ...base, WORKER_FLOW_LIMITS: '{' })).toThrow(WorkerConfigError);
  });

  it('refuses bad values at startup, naming every bad variable', () => {
    const err = (() => {
      try {
        loadWorkerConfig({
          ...base,
          REDIS_URL: 'localhost',
          WORKER_MAX_IN_FLIGHT: '0',
          WORKER_MAX_CONCURRENT_HANDLERS: '0',
          SCHEMA_REGISTRY_URL: 'nope',
        });
      } catch (e) {
        return e as WorkerConfigError;
      }
    })();
    expect(err).toBeInstanceOf(WorkerConfigError);
    expect(err!.message).toMatch(/REDIS_URL/);
    expect(err!.message).toMatch(/WORKER_MAX_IN_FLIGHT/);
    expect(err!.message).toMatch(/WORKER_MAX_CONCURRENT_HANDLERS/);
    expect(err!.message).toMatch(/SCHEMA_REGISTRY_URL/);
    expect(err!.retryable).toBe(false);
  });

  it('bounds handlers by WORKER_MAX_CONCURRENT_HANDLERS, else by a WORKER_MAX_IN_FLIGHT that is set (as before the setting), else 128', () => {
    const d = loadWorkerConfig(base);
    expect(d.WORKER_MAX_CONCURRENT_HANDLERS).toBe(128);
    // The defaults keep one partition from holding every handler slot.
    expect(d.WORKER_MAX_HANDLERS_PER_PARTITION).toBeLessThan(d.WORKER_MAX_CONCURRENT_HANDLERS);
    expect(d.WORKER_MAX_IN_FLIGHT).toBeGreaterThan(d.WORKER_MAX_CONCURRENT_HANDLERS);
    expect(loadWorkerConfig({ ...base, WORKER_MAX_IN_FLIGHT: '1000' }).WORKER_MAX_CONCURRENT_HANDLERS).toBe(
      1000,
    );
    // Unset, a partition's handlers are half the handler slots, so one partition never holds them all; its pipeline
    // (in flight) is as deep as the handler slots, at most 128.
    expect([d.WORKER_MAX_HANDLERS_PER_PARTITION, d.WORKER_MAX_IN_FLIGHT_PER_PARTITION]).toEqual([64, 128]);
    const small = loadWorkerConfig({ ...base, WORKER_MAX_IN_FLIGHT: '48' });
    expect([
      small.WORKER_MAX_CONCURRENT_HANDLERS,
      small.WORKER_MAX_HANDLERS_PER_PARTITION,
      small.WORKER_MAX_IN_FLIGHT_PER_PARTITION,
    ]).toEqual([48, 24, 48]);
    // As before the setting, at most 64 of one partition's handlers by default, however many slots.
    for (const env of [{ WORKER_MAX_CONCURRENT_HANDLERS: '256' }, { WORKER_MAX_IN_FLIGHT: '1000' }])
      expect(loadWorkerConfig({ ...base, ...env }).WORKER_MAX_HANDLERS_PER_PARTITION).toBe(64);
    expect(
      loadWorkerConfig({ ...base, WORKER_MAX_CONCURRENT_HANDLERS: '130' }).WORKER_MAX_HANDLERS_PER_PARTITION,
    ).toBe(64);
    const one = loadWorkerConfig({ ...base, WORKER_MAX_CONCURRENT_HANDLERS: '1' });
    expect([one.WORKER_MAX_HANDLERS_PER_PARTITION, one.WORKER_MAX_IN_FLIGHT_PER_PARTITION]).toEqual([1, 1]);
    // A per-partition in-flight bound that is set bounds the partition's handlers too (as before the setting),
    // unless WORKER_MAX_HANDLERS_PER_PARTITION says otherwise.
    expect(
      loadWorkerConfig({ ...base, WORKER_MAX_IN_FLIGHT_PER_PARTITION: '16' })
        .WORKER_MAX_HANDLERS_PER_PARTITION,
    ).toBe(16);
    expect(
      loadWorkerConfig({
        ...base,
        WORKER_MAX_IN_FLIGHT_PER_PARTITION: '16',
        WORKER_MAX_HANDLERS_PER_PARTITION: '4',
      }).WORKER_MAX_HANDLERS_PER_PARTITION,
    ).toBe(4);
    expect(
      loadWorkerConfig({ ...base, WORKER_MAX_IN_FLIGHT_PER_PARTITION: '200' })
        .WORKER_MAX_IN_FLIGHT_PER_PARTITION,
    ).toBe(200);
    expect(
      loadWorkerConfig({ ...base, WORKER_MAX_IN_FLIGHT: '1000', WORKER_MAX_CONCURRENT_HANDLERS: '50' })
        .WORKER_MAX_CONCURRENT_HANDLERS,
    ).toBe(50);
    expect(
      loadWorkerConfig({ ...base, WORKER_MAX_CONCURRENT_HANDLERS: ' ' }).WORKER_MAX_CONCURRENT_HANDLERS,
    ).toBe(128);
  });

  it('keeps heartbeats well inside the session timeout', () => {
    expect(() =>
      loadWorkerConfig({ ...base, WORKER_SESSION_TIMEOUT_MS: '6000', WORKER_HEARTBEAT_INTERVAL_MS: '3000' }),
    ).toThrow(/at most a third/);
  });
});

describe('worker settings', () => {
  it('WORKER_IDEMPOTENCY_ALLOW_EVICTION is off unless true', () => {
    expect(loadWorkerConfig(base).WORKER_IDEMPOTENCY_ALLOW_EVICTION).toBe(false);
    expect(
      loadWorkerConfig({ ...base, WORKER_IDEMPOTENCY_ALLOW_EVICTION: 'true' })
        .WORKER_IDEMPOTENCY_ALLOW_EVICTION,
    ).toBe(true);
  });
});
