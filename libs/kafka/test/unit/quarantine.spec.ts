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

  it('is paused, named in health as degraded (never failed), tried again after retryMs, and clear once read again', async () => {
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
    expect(await registry.metrics()).toMatch(
      /keyflow_quarantined_partitions\{[^}]*reason="UNDECODABLE_BATCH"[^}]*\} 1/,
    );
    jest.advanceTimersByTime(999);
    expect(calls).toEqual(['pause t:1']);
    jest.advanceTimersByTime(1);
    expect(calls).toEqual(['pause t:1', 'resume t:1']);
    expect(q.has('t', 1)).toBe(false);
    // Still named until the partition is read again: a try that fails again does not make /health flap.
    expect(health.degraded()).toHaveLength(1);
    q.add('t', 1, batch);
    expect(q.list()).toEqual([expect.objectContaining({ tries: 2, baseOffset: '10' })]);
    expect(await registry.metrics()).toMatch(
      /keyflow_undecodable_batches_total\{[^}]*partition="1"[^}]*\} 2/,
    );
    q.ok('t', 1); // paused: a try is still to come, so nothing is cleared
    expect(health.degraded()).toHaveLength(1);
    jest.advanceTimersByTime(1_000);
    q.ok('t', 1);
    expect(health.degraded()).toEqual([]);
    expect(q.list()).toEqual([]);
    expect(await registry.metrics()).not.toMatch(/keyflow_quarantined_partitions\{/);
  });

  it('a partition held by a retryable error backs off from 1 s, doubling to 30 s, with the error code named', () => {
    const { q, calls, health } = setup();
    const err = Object.assign(new Error('schema registry unavailable'), { code: 'REGISTRY_UNAVAILABLE' });
    const delays: number[] = [];
    for (let i = 0; i < 7; i++) {
      q.hold('t', 3, err);
      delays.push(q.list()[0].retryInMs);
      jest.advanceTimersByTime(q.list()[0].retryInMs);
    }
    expect(delays).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]);
    expect(calls.filter((c) => c === 'resume t:3')).toHaveLength(7);
    expect(health.degraded()).toEqual([expect.objectContaining({ code: 'REGISTRY_UNAVAILABLE' })]);
    q.ok('t', 3);
    expect(health.degraded()).toEqual([]);
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
