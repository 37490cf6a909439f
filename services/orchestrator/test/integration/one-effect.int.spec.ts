import { Pool } from 'pg';
import { redrive } from '@keyflow/ops';
import { createLogger } from '@keyflow/observability';
import { eventually, metricValue } from '@keyflow/testing';
import { OrchestratorHarness, post, type ServiceProcess } from './support';

jest.setTimeout(240_000);

const WORKER_FIXTURE = 'services/workers/test/fixtures/test-worker.ts';

/**
 * One effect per logical step, end to end (issue "Scale-out"): a real orchestrator and real worker processes, every
 * handler execution counted in an append-only PostgreSQL table (<p>_exec: one row per execution, never an upsert),
 * so a second execution of a logical step shows as a second row whatever Redis says. The two worker processes
 * (task types seq, and charge + refund) share one consumer group, as two deployments of the default group would:
 * each must be assigned only its own topics.
 */
describe('one effect per logical step (orchestrator and workers)', () => {
  const h = new OrchestratorHarness('one-effect');
  const table = h.ns.prefix.replace(/[^a-z0-9]/g, '_');
  const pg = new Pool({ connectionString: process.env.POSTGRES_URL, max: 2 });
  let url: string;
  const workerEnv = (types: string) => ({
    TEST_TABLE_PREFIX: table,
    TEST_CREATE_TABLES: '1',
    WORKER_TASK_TYPES: types,
    WORKER_LEASE_MS: '3000',
  });
  let payments: ServiceProcess | undefined;

  beforeAll(async () => {
    const orch = await h.startOrchestrator({ TEST_STEP_TIMEOUT_MS: '5000' });
    url = orch.ready ? await orch.ready : '';
    await h.startWorker(workerEnv('seq'), WORKER_FIXTURE);
    await h.readEvents();
  });
  afterAll(async () => {
    if (process.env.KEYFLOW_TEST_DEBUG)
      h.processes.forEach((p, i) => console.log(`--- process ${i}\n${p.logs.slice(-60).join('\n')}`));
    await h.teardown();
    for (const t of ['exec', 'effect', 'order', 'attempt', 'fix', 'abort'])
      await pg.query(`drop table if exists ${table}_${t}`);
    await pg.end();
  });

  const executions = async (key: string) =>
    (
      await pg.query<{ at: Date }>(`select at from ${table}_exec where idempotency_key = $1 order by at`, [
        key,
      ])
    ).rows.map((r) => r.at.getTime());
  const terminal = (runId: string) =>
    eventually(
      `run ${runId} finished`,
      () => h.of(runId).find((e) => /^Run(Completed|Failed|Compensated|Cancelled)$/.test(e.event)),
      { timeoutMs: 90_000 },
    );
  const startPayments = async () => {
    payments ??= await h.startWorker(workerEnv('charge,refund'), WORKER_FIXTURE);
    return payments.ready;
  };
  /** Charge commands the payments worker answered from a completion record instead of running the handler. */
  const replayedCharges = async () =>
    metricValue(await startPayments(), 'keyflow_worker_task_replayed_total', { type: 'charge' });

  it('a payment worker away for longer than the step timeout, then started: the charge runs once and the run completes', async () => {
    const { body } = await post(`${url}/runs`, { workflow: 'payment', input: { amount: 42 } });
    const runId = body.runId as string;
    // The charge's first attempt times out while nobody consumes task.charge; its command stays queued.
    await eventually('the first charge attempt timed out', () =>
      h
        .of(runId)
        .find(
          (e) =>
            e.event === 'StepFailed' &&
            e.value.stepId === 'charge' &&
            (e.value as { error?: { errorClass?: string } }).error?.errorClass === 'StepTimeoutError',
        ),
    );
    await startPayments();
    expect((await terminal(runId))!.event).toBe('RunCompleted');
    expect(await executions(`${runId}/charge`)).toHaveLength(1);
    expect(
      h.of(runId).filter((e) => e.event === 'StepCompleted' && e.value.stepId === 'charge'),
    ).toHaveLength(1);
    const scheduled = h.of(runId).filter((e) => e.event === 'StepScheduled' && e.value.stepId === 'charge');
    expect(scheduled.length).toBeGreaterThanOrEqual(2); // a second attempt was queued behind the first
  });

  it('a payment worker away past every attempt: the run compensates, and a charge that ran is refunded exactly once', async () => {
    payments?.kill('SIGKILL');
    await payments?.exited;
    payments = undefined;
    const { body } = await post(`${url}/runs`, { workflow: 'payment', input: { amount: 7 } });
    const runId = body.runId as string;
    await eventually('the charge compensation scheduled', () =>
      h.of(runId).find((e) => e.event === 'StepScheduled' && e.value.stepId === 'charge.compensate'),
    );
    await startPayments();
    expect((await terminal(runId))!.event).toBe('RunCompensated');
    // Three charge commands and one refund are queued on different topics: whichever comes first, the charge runs
    // at most once, and if it ran, the refund ran after it (the refund fences the charge key before running).
    const refunds = await eventually('the refund ran', () => executions(`${runId}/charge.compensate`), {
      until: (r) => r.length === 1,
    });
    const charges = await executions(`${runId}/charge`);
    expect(charges.length).toBeLessThanOrEqual(1);
    if (charges.length === 1) expect(charges[0]).toBeLessThanOrEqual(refunds[0]);
  });

  it.each([
    ['retry, then redrive', true],
    ['redrive, then retry', false],
  ])(
    'a dead-lettered charge fixed, then %s: the charge runs once and the run completes',
    async (_name, retryFirst) => {
      await startPayments();
      const { body } = await post(`${url}/runs`, {
        workflow: 'payment-plain',
        input: { amount: 9, poison: `fix-${retryFirst}` },
      });
      const runId = body.runId as string;
      expect((await terminal(runId))!.event).toBe('RunFailed');
      await pg.query(`insert into ${table}_fix(name) values ($1)`, [`fix-${retryFirst}`]);
      const doRedrive = async () => {
        const producer = h.ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
        await producer.connect();
        await redrive(h.ns.kafka, {
          dlqTopic: h.codec.physical('task.charge.dlq'),
          filter: {},
          ratePerSec: 100,
          producer,
          logger: createLogger('redrive', { level: 'silent' }),
          ledger: { codec: h.codec, handledBy: 'one-effect-test' },
          includeHandled: true, // the test redrives the same record twice on purpose
        });
        await producer.disconnect();
      };
      const doRetry = async () => expect((await post(`${url}/runs/${runId}/retry`, {})).status).toBe(202);
      if (retryFirst) {
        await doRetry();
        await eventually('completed after the retry', () =>
          h.of(runId).find((e) => e.event === 'RunCompleted'),
        );
        const before = await replayedCharges();
        await doRedrive();
        // The redriven attempt-1 command found the step completed and re-published its result.
        await eventually('the redriven command answered from the record', replayedCharges, {
          until: (n) => n > before,
        });
      } else {
        await doRedrive();
        await eventually('the redriven charge ran', () => executions(`${runId}/charge`), {
          until: (r) => r.length === 1,
        });
        await doRetry();
        await eventually('completed after the retry', () =>
          h.of(runId).find((e) => e.event === 'RunCompleted'),
        );
      }
      expect(await executions(`${runId}/charge`)).toHaveLength(1);
    },
  );

  it('a step waiting for its flow-limit admission longer than its step timeout is not timed out: every step completes at attempt 1', async () => {
    // Concurrency 1 and 500 ms per charge: the tenth run's charge waits about 4.5 s for its turn, its step timeout
    // is 3 s (workflow flow-limited; 1 s more than the 2 s it had, which a loaded CI overran once, 2026-12-05).
    // Its worker reports the wait (TaskWaiting), so the deadline starts at the
    // admission; counting from the dispatch it would time out and show as attempt 2.
    const flow = await h.startWorker(
      {
        ...workerEnv('limited.charge'),
        WORKER_GROUP_ID: h.ns.groupId('flow-workers'),
        WORKER_FLOW_LIMITS: JSON.stringify({ 'limited.charge': { concurrency: 1 } }),
        WORKER_FLOW_WAIT_REPORT_MS: '200',
        WORKER_MAX_IN_FLIGHT: '64',
        WORKER_MAX_IN_FLIGHT_PER_PARTITION: '32',
      },
      WORKER_FIXTURE,
    );
    await flow.ready;
    const counter = `flow-deadline-${process.pid}-${Date.now()}`;
    const startRun = async (i: number, ms: number) => {
      const input = { counter, customerId: `cust-${i}`, ms };
      return (await post(`${url}/runs`, { workflow: 'flow-limited', input })).body.runId as string;
    };
    // One run first, so the worker consumes its topic before the queue forms (a command the worker has not
    // fetched yet is not waiting for the limit: its deadline runs from the dispatch).
    expect((await terminal(await startRun(-1, 1)))!.event).toBe('RunCompleted');
    const runIds = await Promise.all(Array.from({ length: 10 }, (_, i) => startRun(i, 500)));
    const ends = await Promise.all(runIds.map(terminal));
    expect(ends.map((e) => e!.event)).toEqual(runIds.map(() => 'RunCompleted'));
    const at = (e: { value: { metadata: { eventId: string } } }) =>
      new Date((e.value.metadata as { occurredAt?: number }).occurredAt as number).getTime();
    const spans: number[] = [];
    for (const runId of runIds) {
      const events = h.of(runId);
      expect(events.filter((e) => e.event === 'StepFailed')).toEqual([]);
      const scheduled = events.filter((e) => e.event === 'StepScheduled');
      const completed = events.filter((e) => e.event === 'StepCompleted');
      expect(scheduled.map((e) => e.value.attempt)).toEqual([1]);
      expect(completed.map((e) => e.value.attempt)).toEqual([1]);
      spans.push(at(completed[0]) - at(scheduled[0]));
    }
    // Some step did live longer than its step timeout (else this test would show nothing).
    expect(Math.max(...spans)).toBeGreaterThan(3_000);
  });
});
