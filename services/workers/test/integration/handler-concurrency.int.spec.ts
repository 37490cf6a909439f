import type { TaskCompleted } from '@keyflow/schemas';
import { eventually } from '@keyflow/testing';
import { WorkerHarness } from './support';

jest.setTimeout(120_000);

describe('handler concurrency', () => {
  const h = new WorkerHarness('handlers');
  const LIMIT = 3;
  beforeAll(async () => {
    await h.setup(['gauge']);
    // Many more commands dispatched than handlers allowed: the bound on handlers is the one that must hold.
    await h.startWorker({
      WORKER_MAX_CONCURRENT_HANDLERS: String(LIMIT),
      WORKER_MAX_IN_FLIGHT: '64',
      WORKER_MAX_IN_FLIGHT_PER_PARTITION: '64',
    });
  });
  afterAll(() => h.teardown());

  it('never runs more handlers at once than WORKER_MAX_CONCURRENT_HANDLERS, and a task waiting for a slot does not spend its attempt timeout', async () => {
    const HANDLER_MS = 150;
    // 24 keys, so the ordered consumer dispatches them all at once; 8 rounds of 3 take at least 1.2 s, longer
    // than one attempt's timeout: a timeout started before the handler's slot would fail the later ones.
    const commands = Array.from({ length: 24 }, (_, i) =>
      h.command('gauge', `g${i}`, { ms: HANDLER_MS }, { timeoutMs: 1_000, maxAttempts: 1 }),
    );
    await h.send(commands);
    const results = await h.results.wait(commands.length, 60_000);
    expect(results.map((r) => r.event)).toEqual(commands.map(() => 'TaskCompleted'));
    const running = results.map(
      (r) => (JSON.parse((r.value as TaskCompleted).output) as { running: number }).running,
    );
    // Reached (the tasks did run side by side) and never passed.
    expect(Math.max(...running)).toBe(LIMIT);
  });
});

describe('handler slots and other partitions, with the default bounds', () => {
  const h = new WorkerHarness('handler-share');
  beforeAll(async () => {
    await h.setup(['slow'], 2);
    await h.startWorker(); // WORKER_MAX_CONCURRENT_HANDLERS and the in-flight bounds left at their defaults
  });
  afterAll(() => h.teardown());

  it("a partition whose handlers all hang never takes every handler slot: another partition's task still runs", async () => {
    // More hanging tasks on partition 0 than the default handler bound (128), each on its own key, so that all
    // of them are dispatched at once as far as partition 0's in-flight bound lets them.
    const hanging = Array.from({ length: 160 }, (_, i) =>
      h.command('slow', `stuck-${i}`, { ms: 600_000 }, { timeoutMs: 600_000, maxAttempts: 1 }),
    );
    await h.sendToPartition(0, hanging);
    await eventually(
      'the hanging handlers to start',
      async () => Number((await h.rows<{ n: string }>('select count(*) n from {t}_exec'))[0].n) >= 32,
      { timeoutMs: 30_000 },
    );
    const other = h.command('slow', 'free', { ms: 10 }, { timeoutMs: 10_000, maxAttempts: 1 });
    await h.sendToPartition(1, [other]);
    const r = await eventually(
      'a result for the task on partition 1',
      () => h.results.items.find((x) => x.value.idempotencyKey === other.idempotencyKey),
      { timeoutMs: 20_000 },
    );
    expect(r!.event).toBe('TaskCompleted');
  });
});

describe('handler slots at shutdown', () => {
  const h = new WorkerHarness('handler-drain');
  beforeAll(() => h.setup(['slow', 'flaky'], 1));
  afterAll(() => h.teardown());

  it('tasks waiting for a handler slot when SIGTERM comes do not start; they run once each after a restart', async () => {
    const w = await h.startWorker({
      WORKER_MAX_CONCURRENT_HANDLERS: '1',
      WORKER_MAX_IN_FLIGHT: '16',
      WORKER_MAX_IN_FLIGHT_PER_PARTITION: '16',
      WORKER_DRAIN_DEADLINE_MS: '20000',
    });
    const commands = Array.from({ length: 6 }, (_, i) =>
      h.command(
        'slow',
        `d${i}`,
        { ms: 1_500, entity: `d${i}`, seq: i },
        { timeoutMs: 10_000, maxAttempts: 1 },
      ),
    );
    await h.send(commands);
    const started = async () => Number((await h.rows<{ n: string }>('select count(*) n from {t}_exec'))[0].n);
    await eventually('the first handler to start', async () => (await started()) >= 1, { timeoutMs: 30_000 });
    w.kill('SIGTERM');
    expect(await w.exited).toBe(0);
    // The running handler finished; none of those waiting for its slot started during the drain.
    expect(await started()).toBe(1);
    const restarted = await h.startWorker({ WORKER_MAX_CONCURRENT_HANDLERS: '1' });
    const results = await h.results.wait(commands.length, 60_000);
    expect(new Set(results.map((r) => r.value.idempotencyKey)).size).toBe(commands.length);
    expect(results.every((r) => r.event === 'TaskCompleted')).toBe(true);
    const effects = await h.rows<{ idempotency_key: string; n: string }>(
      'select idempotency_key, count(*) n from {t}_exec group by idempotency_key',
    );
    expect(effects.map((e) => Number(e.n))).toEqual(commands.map(() => 1));
    // Stopped here: left running, it shares the group with the next test's worker and may take its command, which
    // then retries outside the worker that test stops.
    restarted.kill('SIGTERM');
    expect(await restarted.exited).toBe(0);
  });

  it('a task in its retry backoff when SIGTERM comes still gets its next attempt during the drain', async () => {
    const w = await h.startWorker({
      WORKER_RETRY_INITIAL_MS: '1500',
      WORKER_RETRY_MAX_MS: '1500',
      WORKER_DRAIN_DEADLINE_MS: '20000',
    });
    const cmd = h.command('flaky', 'retry-at-stop', { failTimes: 1 }, { maxAttempts: 3 });
    await h.send([cmd]);
    const attempts = () =>
      h.rows<{ attempt: number }>('select attempt from {t}_attempt where idempotency_key = $1', [
        cmd.idempotencyKey,
      ]);
    await eventually('the first attempt to fail', async () => (await attempts()).length >= 1, {
      timeoutMs: 30_000,
    });
    w.kill('SIGTERM');
    expect(await w.exited).toBe(0);
    // Attempt 2 ran in the draining process and completed the step: attempts are not reset by a restart.
    expect((await attempts()).map((a) => a.attempt).sort()).toEqual([1, 2]);
    const r = await eventually('its result', () =>
      h.results.items.find((x) => x.value.idempotencyKey === cmd.idempotencyKey),
    );
    expect(r!.event).toBe('TaskCompleted');
  });
});
