import { ComponentHealth, createLogger, createMetricsRegistry } from '@keyflow/observability';
import { PartitionQuarantine, type UndecodableBatch } from '../../src';

const logger = createLogger('test', { level: 'silent' });
const batch: UndecodableBatch = {
  codecId: 3,
  baseOffset: '10',
  lastOffset: '12',
  records: 3,
  reason: 'bad frame',
};

describe('a partition quarantined on an undecodable batch', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  function setup() {
    const calls: string[] = [];
    const health = new ComponentHealth();
    const registry = createMetricsRegistry('test');
    const q = new PartitionQuarantine({
      component: 'c',
      logger,
      health,
      registry,
      retryMs: 1_000,
      partitions: {
        pause: (t, p) => calls.push(`pause ${t}:${p}`),
        resume: (t, p) => calls.push(`resume ${t}:${p}`),
      },
    });
    return { q, calls, health, registry };
  }

  it('is paused, named in health as degraded (never failed), and tried again after retryMs', async () => {
    const { q, calls, health, registry } = setup();
    q.add('t', 1, batch);
    expect(calls).toEqual(['pause t:1']);
    expect(q.has('t', 1)).toBe(true);
    expect(health.healthy).toBe(true);
    expect(health.degraded()).toEqual([
      expect.objectContaining({
        id: 'c:t:1',
        code: 'UNDECODABLE_BATCH',
        error: expect.stringMatching(/t:1 .*10\.\.12/),
      }),
    ]);
    expect(await registry.metrics()).toMatch(/keyflow_quarantined_partitions\{[^}]*\} 1/);
    jest.advanceTimersByTime(999);
    expect(calls).toEqual(['pause t:1']);
    jest.advanceTimersByTime(1);
    expect(calls).toEqual(['pause t:1', 'resume t:1']);
    expect(q.has('t', 1)).toBe(false);
    expect(health.degraded()).toEqual([]);
    // Still undecodable on the next try: quarantined again, counted twice.
    q.add('t', 1, batch);
    expect(q.list()).toEqual([expect.objectContaining({ tries: 2 })]);
    expect(await registry.metrics()).toMatch(
      /keyflow_undecodable_batches_total\{[^}]*partition="1"[^}]*\} 2/,
    );
  });

  it('a revoked partition is forgotten without a resume (its new owner meets the batch itself)', () => {
    const { q, calls, health } = setup();
    q.add('t', 2, batch);
    q.drop('t', 2);
    jest.advanceTimersByTime(5_000);
    expect(calls).toEqual(['pause t:2']);
    expect(q.list()).toEqual([]);
    expect(health.degraded()).toEqual([]);
  });
});
