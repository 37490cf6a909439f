import { CompressionTypes } from '@keyflow/kafka';
import { EventCodec } from '@keyflow/contracts';
import { ComponentHealth, createLogger } from '@keyflow/observability';
import { eventually, TestNamespace } from '@keyflow/testing';
import { snapshotParts } from '@keyflow/workflow';
import { oneWfStatePartition, smallRunState, snapshotValue } from '../fixtures/run-states';
import { BARRIER_PREFIX, CatchUpStalledError, RunReadModel } from '../../src/engine/read-model';
import { RefusedRequest, RequestError, unknownRun } from '../../src/api/runs.service';

jest.setTimeout(180_000);

const RECORDS = 100_000;
/**
 * The no-progress bound of the first test, ms: far less than the catch-up takes (3-4 s on an idle 2-core machine),
 * and above the gap between two fetched batches under CI's load (596 ms was seen once with a bound of 500 ms).
 */
const BOUND_MS = 1_000;

/**
 * A take-over waits for its barrier as long as the read model keeps reading the partition (a large wf.state takes
 * what it takes to catch up), and gives up only once nothing was read for the bound (issue 39, fault 10: a fixed
 * 60 s wait made an orchestrator on a large wf.state restart from zero for ever).
 */
describe('the read model catching up on a large wf.state', () => {
  const ns = new TestNamespace('catch-up');
  const codec = new EventCodec({ registryUrl: ns.infra.schemaRegistryUrl, topicPrefix: `${ns.prefix}.` });
  let rm: RunReadModel;
  const snapshot = (runId: string, state: string, status = 'completed', sequence = 1) =>
    snapshotValue(codec, { runId, sequence, status, state });
  const runState = (runId: string, n: number, sequence = 1) =>
    snapshotParts(smallRunState(runId, sequence, n, { status: 'completed', endedAt: 2 }), undefined).core;

  beforeAll(async () => {
    await oneWfStatePartition(ns, codec);
    const producer = ns.kafka.producer();
    await producer.connect();
    for (let i = 0; i < RECORDS; i += 1000) {
      const messages = [];
      for (let j = i; j < i + 1000; j++) {
        const runId = `run-${j}`;
        messages.push({ key: runId, value: snapshot(runId, runState(runId, j)), partition: 0 });
      }
      await producer.send({
        topic: codec.physical('wf.state'),
        compression: CompressionTypes.GZIP,
        messages,
      });
    }
    const barrier = `${BARRIER_PREFIX}0`;
    await producer.send({
      topic: codec.physical('wf.state'),
      messages: [{ key: barrier, value: snapshot(barrier, 'nonce-1', 'barrier'), partition: 0 }],
    });
    await producer.disconnect();
    rm = new RunReadModel(
      ns.kafka,
      codec,
      ns.groupId('read-model'),
      createLogger('test', { level: 'silent' }),
    );
  });
  afterAll(async () => {
    await rm?.stop();
    await ns.cleanup();
  });

  it('a barrier behind 100,000 records is waited for while they are read, however much longer than the no-progress bound that takes', async () => {
    await rm.start();
    await eventually('the catch-up began', () => rm.size > 0, { timeoutMs: 60_000, intervalMs: 10 });
    const t0 = Date.now();
    // 500 ms without progress would give up; reading the rest takes longer, with progress all along.
    await rm.waitForBarrier(0, 'nonce-1', BOUND_MS);
    expect(rm.size).toBe(RECORDS);
    expect(Date.now() - t0).toBeGreaterThan(BOUND_MS);
  });

  it('a barrier that never comes gives up with CATCH_UP_STALLED once nothing is read for the bound', async () => {
    const t0 = Date.now();
    await expect(rm.waitForBarrier(0, 'never-written', 1_000)).rejects.toBeInstanceOf(CatchUpStalledError);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1_000);
  });

  it('superseded versions of a run in one batch leave its latest; a tombstone in between is applied (a run id used again starts over)', async () => {
    const producer = ns.kafka.producer();
    await producer.connect();
    const barrier = `${BARRIER_PREFIX}0`;
    const rec = (key: string, value: Buffer | null) => ({ key, value, partition: 0 });
    // Held before the batch, with a higher sequence than the run that uses its id again.
    await producer.send({
      topic: codec.physical('wf.state'),
      messages: [
        rec('again', snapshot('again', runState('again', 1, 5), 'completed', 5)),
        rec(barrier, snapshot(barrier, 'nonce-2', 'barrier')),
      ],
    });
    await rm.waitForBarrier(0, 'nonce-2', 30_000);
    expect(rm.get('again')).toMatchObject({ sequence: 5 });
    await producer.send({
      topic: codec.physical('wf.state'),
      messages: [
        rec('again', snapshot('again', runState('again', 2, 6), 'completed', 6)),
        rec('again', null), // forgotten
        rec('again', snapshot('again', runState('again', 3, 1), 'completed', 1)), // the id used again
        rec('twice', snapshot('twice', runState('twice', 1, 1), 'completed', 1)),
        rec('twice', snapshot('twice', runState('twice', 2, 2), 'completed', 2)),
        rec(barrier, snapshot(barrier, 'nonce-3', 'barrier')),
      ],
    });
    await producer.disconnect();
    await rm.waitForBarrier(0, 'nonce-3', 30_000);
    expect(rm.get('again')).toMatchObject({ sequence: 1, input: { n: 3 } });
    expect(rm.get('twice')).toMatchObject({ sequence: 2, input: { n: 2 } });
  });

  it('until it has read all of wf.state committed before its start, a run it does not hold is CATCHING_UP (503), never 404', async () => {
    const health = new ComponentHealth();
    const fresh = new RunReadModel(
      ns.kafka,
      codec,
      ns.groupId('read-model-fresh'),
      createLogger('test', { level: 'silent' }),
      { health },
    );
    try {
      await fresh.start();
      // The last run written (100,000 records in): not read yet right after the start.
      const last = `run-${RECORDS - 1}`;
      expect(fresh.get(last)).toBeUndefined();
      expect(fresh.caughtUp()).toBe(false);
      expect(fresh.catchingUp()).toEqual([0]);
      expect(health.degraded().map((d) => d.code)).toContain('CATCHING_UP');
      const early = unknownRun(fresh, last);
      expect(early).toBeInstanceOf(RefusedRequest);
      expect(early).toMatchObject({ status: 503, code: 'CATCHING_UP', retryable: true });
      // Caught up exactly when everything committed before the start has been read.
      await eventually('caught up', () => fresh.caughtUp(), { timeoutMs: 120_000, intervalMs: 5 });
      expect(fresh.get(last)).toBeDefined();
      expect(fresh.get('twice')).toMatchObject({ sequence: 2 });
      expect(health.degraded()).toEqual([]);
      const late = unknownRun(fresh, 'never-started');
      expect(late).not.toBeInstanceOf(RefusedRequest);
      expect(late).toBeInstanceOf(RequestError);
      expect((late as RequestError).notFound).toBe(true);
    } finally {
      await fresh.stop();
    }
  });
});
