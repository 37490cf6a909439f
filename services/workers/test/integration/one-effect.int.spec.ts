import Redis from 'ioredis';
import type { TaskCompleted, TaskFailed } from '@keyflow/schemas';
import { eventually } from '@keyflow/testing';
import { WorkerHarness } from './support';

jest.setTimeout(120_000);

/**
 * One effect per logical step, at the worker (issue "Scale-out"): attempts, redeliveries and redrives of a step
 * share its idempotency key, so the handler runs once; a compensation fences the step it undoes; a lost lease
 * aborts the handler. Executions are counted in PostgreSQL (<p>_exec, one row per execution), outside Redis.
 */
describe('one effect per logical step (worker)', () => {
  const h = new WorkerHarness('one-effect');
  const leaseMs = 1_500;
  beforeAll(async () => {
    await h.setup(['slow', 'seq', 'charge', 'refund']);
    await h.startWorker({ WORKER_LEASE_MS: String(leaseMs) });
  });
  afterAll(() => h.teardown());

  const executions = async (key: string) =>
    Number(
      (await h.rows<{ n: string }>('select count(*) as n from {t}_exec where idempotency_key = $1', [key]))[0]
        .n,
    );
  const results = (key: string) => h.results.items.filter((r) => r.value.idempotencyKey === key);

  it('a later attempt of a step that completed re-publishes the stored result under its own attempt, without running again', async () => {
    const first = h.command('slow', 'acct-1', { ms: 300 }, { runId: 'run-a', stepId: 'charge', attempt: 1 });
    const second = h.command('slow', 'acct-1', { ms: 300 }, { runId: 'run-a', stepId: 'charge', attempt: 2 });
    await h.send([first, second]);
    await eventually('both attempts answered', () => results(first.idempotencyKey), {
      until: (r) => r.length >= 2,
    });
    const r = results(first.idempotencyKey) as Array<{ event: string; value: TaskCompleted }>;
    expect(r.map((x) => [x.event, x.value.attempt, x.value.replayed])).toEqual([
      ['TaskCompleted', 1, false],
      ['TaskCompleted', 2, true],
    ]);
    expect(await executions(first.idempotencyKey)).toBe(1);
  });

  it('an attempt that arrives while an earlier one still runs on another key waits for it and runs nothing', async () => {
    // Different entity keys: the two attempts are not ordered by the partition, only by the lease.
    const first = h.command(
      'slow',
      'acct-2',
      { ms: 2_000 },
      { runId: 'run-b', stepId: 'charge', attempt: 1 },
    );
    const second = h.command(
      'slow',
      'acct-3',
      { ms: 2_000 },
      { runId: 'run-b', stepId: 'charge', attempt: 2 },
    );
    await h.send([first]);
    await eventually('attempt 1 running', () => executions(first.idempotencyKey), { until: (n) => n === 1 });
    await h.send([second]);
    await eventually('both attempts answered', () => results(first.idempotencyKey), {
      until: (r) => r.length >= 2,
    });
    expect(results(first.idempotencyKey).map((x) => x.value.attempt)).toEqual([1, 2]);
    expect(await executions(first.idempotencyKey)).toBe(1);
  });

  it('a compensation fences the step it undoes: a command of that step arriving later never runs', async () => {
    const stepKey = 'run-c/charge';
    const refund = h.command(
      'refund',
      'acct-4',
      {},
      { runId: 'run-c', stepId: 'charge.compensate', compensates: stepKey },
    );
    await h.send([refund]);
    await eventually('refund done', () => results(refund.idempotencyKey), { until: (r) => r.length === 1 });
    const late = h.command(
      'charge',
      'acct-4',
      { amount: 5 },
      { runId: 'run-c', stepId: 'charge', attempt: 3 },
    );
    expect(late.idempotencyKey).toBe(stepKey);
    await h.send([late]);
    const [r] = await eventually('the late charge answered', () => results(stepKey), {
      until: (x) => x.length === 1,
    });
    expect(r.event).toBe('TaskFailed');
    expect((r.value as TaskFailed).error).toMatchObject({
      errorClass: 'StepCompensatedError',
      code: 'COMPENSATED',
      retryable: false,
    });
    expect(await executions(stepKey)).toBe(0);
    expect(await executions(refund.idempotencyKey)).toBe(1);
  });

  it('a compensation of a step that completed runs after it, and the step is not run again', async () => {
    const charge = h.command('charge', 'acct-5', { amount: 5 }, { runId: 'run-d', stepId: 'charge' });
    await h.send([charge]);
    await eventually('charged', () => results(charge.idempotencyKey), { until: (r) => r.length === 1 });
    const refund = h.command(
      'refund',
      'acct-5',
      {},
      { runId: 'run-d', stepId: 'charge.compensate', compensates: charge.idempotencyKey },
    );
    const again = h.command(
      'charge',
      'acct-5',
      { amount: 5 },
      { runId: 'run-d', stepId: 'charge', attempt: 2 },
    );
    await h.send([refund, again]);
    await eventually(
      'refund and the second attempt answered',
      () => results(charge.idempotencyKey).length + results(refund.idempotencyKey).length,
      { until: (n) => n === 3 },
    );
    expect(await executions(charge.idempotencyKey)).toBe(1);
    expect(await executions(refund.idempotencyKey)).toBe(1);
    expect(results(charge.idempotencyKey).map((r) => r.event)).toEqual(['TaskCompleted', 'TaskCompleted']);
  });

  it('a lost lease aborts the running handler; the step then runs once under the new holder', async () => {
    const cmd = h.command('slow', 'acct-6', { ms: 4_000 }, { runId: 'run-e', stepId: 'call' });
    await h.send([cmd]);
    await eventually('running', () => executions(cmd.idempotencyKey), { until: (n) => n === 1 });
    // Another holder takes the key (as after an expiry in Redis): the next renewal finds it and must abort.
    const redis = new Redis(h.ns.infra.redisUrl);
    const keys = await redis.keys(`${h.prefix}*${cmd.idempotencyKey}`);
    expect(keys).toHaveLength(1);
    await redis.set(keys[0], JSON.stringify({ s: 'running', t: 'intruder', a: 1 }), 'PX', 2_000);
    redis.disconnect();
    const aborted = await eventually(
      'the first handler aborted',
      () =>
        h.rows<{ reason: string }>('select reason from {t}_abort where idempotency_key = $1', [
          cmd.idempotencyKey,
        ]),
      { until: (r) => r.length === 1, timeoutMs: 10_000 },
    );
    expect(aborted[0].reason).toBe('LeaseLostError');
    const [r] = await eventually('completed once', () => results(cmd.idempotencyKey), {
      until: (x) => x.length === 1,
      timeoutMs: 30_000,
    });
    expect(r.event).toBe('TaskCompleted');
    expect(await executions(cmd.idempotencyKey)).toBe(2); // the aborted run and the one that completed
  });
});
