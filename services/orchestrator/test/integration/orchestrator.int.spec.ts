import { Webhook } from 'standardwebhooks';
import { eventually, testWorkflows as builtinWorkflows } from '@keyflow/testing';
import { createLogger } from '@keyflow/observability';
import { flatRunState } from '@keyflow/workflow';
import { rebuildRuns } from '../../src/rebuild';
import { RunReadModel } from '../../src/engine/read-model';
import { saga } from '../fixtures/test-workflows';
import { WorkflowRegistry } from '../../src/workflows/registry';
import {
  distinctEvents,
  OrchestratorHarness,
  TERMINAL_EVENTS,
  post,
  TEST_WEBHOOK_SECRET,
  type Lifecycle,
} from './support';

jest.setTimeout(240_000);

const finishedRuns = (h: OrchestratorHarness) =>
  new Set(h.events.items.filter((e) => TERMINAL_EVENTS.has(e.event)).map((e) => e.value.runId));

/**
 * Each run has exactly one StepCompleted per step and one terminal event, counted over distinct event ids (a live
 * reader that kafkajs restarts sees some events again; see distinctEvents).
 */
function assertExactlyOnce(h: OrchestratorHarness, runIds: string[], steps: string[]) {
  const byRun = new Map<string, Lifecycle[]>();
  const events = distinctEvents(h.events);
  if (events.length < h.events.items.length)
    console.log(`the live reader saw ${h.events.items.length - events.length} events again (same event id)`);
  events.forEach((e) => byRun.set(e.value.runId, [...(byRun.get(e.value.runId) ?? []), e]));
  const problems: string[] = [];
  for (const id of runIds) {
    const evs = byRun.get(id) ?? [];
    const completed = evs.filter((e) => e.event === 'StepCompleted').map((e) => e.value.stepId as string);
    if (JSON.stringify(completed) !== JSON.stringify(steps))
      problems.push(`${id}: StepCompleted ${completed.join(',')}`);
    if (evs.filter((e) => e.event === 'RunCompleted').length !== 1)
      problems.push(`${id}: ${evs.filter((e) => e.event === 'RunCompleted').length} RunCompleted`);
    if (evs.filter((e) => e.event === 'RunStarted').length !== 1)
      problems.push(`${id}: ${evs.filter((e) => e.event === 'RunStarted').length} RunStarted`);
  }
  expect(problems.slice(0, 5)).toEqual([]);
}

async function startRuns(url: string, n: number, tag: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i += 50) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(50, n - i) }, (_, j) =>
        post(
          `${url}/runs`,
          { workflow: 'three-step', input: { n: i + j } },
          { 'Idempotency-Key': `${tag}-${i + j}` },
        ),
      ),
    );
    batch.forEach((r) => {
      expect(r.status).toBe(202);
      ids.push(r.body.runId as string);
    });
  }
  return ids;
}

describe('the orchestrator', () => {
  it('1,000 runs of a 3-step workflow complete against real workers, each step completed exactly once', async () => {
    const h = new OrchestratorHarness('orch-1k');
    try {
      // The workers wait for the topics the orchestrator creates; the reader needs them at once.
      const [orch] = await Promise.all([h.startOrchestrator(), h.startWorker(), h.startWorker()]);
      await h.readEvents();
      const url = await orch.ready;
      const runs = Number(process.env.ORCH_RUNS ?? 1000);
      const t0 = Date.now();
      const ids = await startRuns(url, runs, 'k');
      await eventually('all runs finished', () => finishedRuns(h).size, {
        until: (n) => n >= runs,
        timeoutMs: 180_000,
        intervalMs: 250,
      });
      console.log(`${runs} three-step runs finished in ${Date.now() - t0} ms`);
      assertExactlyOnce(h, ids, ['first', 'second', 'third']);
      const sample = (await (await fetch(`${url}/runs/${ids[0]}`)).json()) as {
        status: string;
        steps: Record<string, { attempt: number }>;
      };
      expect(sample.status).toBe('completed');
      expect(sample.steps.third.attempt).toBe(1);
      // The read model took most states as its engine committed them (not decoded again), and holds the same as a
      // read model that decoded every record.
      const health = (await (await fetch(`${url}/health`)).json()) as {
        readModel: { snapshotsRead: number; snapshotsOwn: number };
      };
      expect(health.readModel.snapshotsOwn).toBeGreaterThan(0);
      await h.codec.registerTopics(['wf.state']);
      const decoded = new RunReadModel(
        h.ns.kafka,
        h.codec,
        h.ns.groupId('decoding-read-model'),
        createLogger('test', { level: 'silent' }),
      );
      try {
        await decoded.start();
        await eventually('caught up', () => decoded.caughtUp(), { timeoutMs: 60_000, intervalMs: 20 });
        expect(decoded.snapshotsSkipped).toBe(0);
        for (const id of ids.slice(0, 100)) {
          const view = await (await fetch(`${url}/runs/${id}`)).json();
          expect(view).toEqual(JSON.parse(JSON.stringify(flatRunState(decoded.get(id)!))));
        }
      } finally {
        await decoded.stop();
      }
    } finally {
      await h.teardown();
    }
  });

  it('killed with SIGKILL while 100 runs are in flight, then restarted: all complete, no step event duplicated or lost', async () => {
    const h = new OrchestratorHarness('orch-kill');
    try {
      let [orch] = await Promise.all([h.startOrchestrator(), h.startWorker()]);
      await h.readEvents();
      const ids = await startRuns(await orch.ready, 100, 'kill');
      await eventually(
        'some progress',
        () => h.events.items.filter((e) => e.event === 'StepCompleted').length,
        { until: (n) => n >= 30, intervalMs: 10 },
      );
      orch.kill('SIGKILL');
      await orch.exited;
      const doneBefore = finishedRuns(h).size;
      orch = await h.startOrchestrator();
      await eventually('all runs finished', () => finishedRuns(h).size, {
        until: (n) => n >= 100,
        timeoutMs: 120_000,
        intervalMs: 250,
      });
      console.log(`runs finished before the kill: ${doneBefore} of 100`);
      assertExactlyOnce(h, ids, ['first', 'second', 'third']);
      const report = await rebuildRuns(
        h.ns.kafka,
        h.codec,
        new WorkflowRegistry().register(...builtinWorkflows),
      );
      expect(report).toMatchObject({ runsLive: 100, runsRebuilt: 100, matching: 100, differences: [] });
    } finally {
      await h.teardown();
    }
  });

  it('two instances share the partitions; one killed mid-run: all runs complete and the survivor answers for every run', async () => {
    const h = new OrchestratorHarness('orch-two');
    try {
      const [a, b] = await Promise.all([
        h.startOrchestrator({ ORCHESTRATOR_INSTANCE_ID: 'a' }),
        h.startOrchestrator({ ORCHESTRATOR_INSTANCE_ID: 'b' }),
        h.startWorker(),
      ]);
      await h.readEvents();
      const [ua, ub] = [await a.ready, await b.ready];
      await eventually(
        'both own partitions',
        async () => {
          const [ha, hb] = await Promise.all([
            fetch(`${ua}/health`).then((r) => r.json()),
            fetch(`${ub}/health`).then((r) => r.json()),
          ]);
          return (
            (ha as { partitions: number[] }).partitions.length > 0 &&
            (hb as { partitions: number[] }).partitions.length > 0
          );
        },
        { timeoutMs: 60_000, intervalMs: 200 },
      );
      const ids = [...(await startRuns(ua, 100, 'two-a')), ...(await startRuns(ub, 100, 'two-b'))];
      await eventually('some progress', () => finishedRuns(h).size, {
        until: (n) => n >= 20,
        intervalMs: 20,
      });
      a.kill('SIGKILL');
      await a.exited;
      await eventually('all runs finished', () => finishedRuns(h).size, {
        until: (n) => n >= 200,
        timeoutMs: 120_000,
        intervalMs: 250,
      });
      assertExactlyOnce(h, ids, ['first', 'second', 'third']);
      const answers = await eventually(
        'the survivor knows every run as completed',
        async () => {
          const all = await Promise.all(
            ids.map((id) =>
              fetch(`${ub}/runs/${id}`).then(async (r) =>
                r.status === 200 ? ((await r.json()) as { status: string }).status : String(r.status),
              ),
            ),
          );
          return all;
        },
        { until: (all) => all.every((s) => s === 'completed'), timeoutMs: 30_000, intervalMs: 500 },
      );
      expect(answers).toHaveLength(200);
      const page = (await (
        await fetch(`${ub}/runs?workflow=three-step&status=completed&limit=150`)
      ).json()) as { runs: unknown[]; next: string };
      expect(page.runs).toHaveLength(150);
      const rest = (await (
        await fetch(
          `${ub}/runs?workflow=three-step&status=completed&limit=150&cursor=${encodeURIComponent(page.next)}`,
        )
      ).json()) as { runs: unknown[]; next: null };
      expect(rest.runs).toHaveLength(50);
      expect(rest.next).toBeNull();
    } finally {
      await h.teardown();
    }
  });

  it('saga: a failing third step compensates steps two and one, in that order, and the run ends compensated', async () => {
    const h = new OrchestratorHarness('orch-saga');
    try {
      const orch = await h.startOrchestrator();
      await h.readEvents();
      await h.simulateWorker(['saga.reserve', 'saga.charge', 'saga.release', 'saga.refund'], (c) => ({
        output: { did: c.taskType },
      }));
      await h.simulateWorker(['saga.ship'], () => ({ error: 'AddressInvalid', retryable: false }));
      const { body } = await post(`${await orch.ready}/runs`, { workflow: 'saga', input: { order: 1 } });
      const runId = body.runId as string;
      await eventually('compensated', () => h.of(runId).find((e) => e.event === 'RunCompensated'), {
        timeoutMs: 60_000,
      });
      const steps = h
        .of(runId)
        .filter((e) => e.event === 'StepScheduled')
        .map((e) => e.value.stepId);
      expect(steps).toEqual(['reserve', 'charge', 'ship', 'charge.compensate', 'reserve.compensate']);
      expect(h.of(runId).find((e) => e.event === 'RunCompensated')!.value).toMatchObject({
        failedStepId: 'ship',
        compensatedSteps: ['charge', 'reserve'],
      });

      // Rebuilding from the topics agrees with the live state.
      const registry = new WorkflowRegistry().register(...builtinWorkflows, saga);
      const report = await rebuildRuns(h.ns.kafka, h.codec, registry);
      expect(report).toMatchObject({
        runsLive: 1,
        runsRebuilt: 1,
        matching: 1,
        differences: [],
        unrebuildable: [],
      });
    } finally {
      await h.teardown();
    }
  });

  it('a step whose worker never answers times out, is retried per policy, then the run compensates', async () => {
    const h = new OrchestratorHarness('orch-timeout');
    try {
      const orch = await h.startOrchestrator();
      await h.readEvents();
      await h.simulateWorker(['slow.prepare', 'slow.undo'], () => ({ output: 'ok' }));
      const never = await h.simulateWorker(['slow.never'], () => undefined);
      const { body } = await post(`${await orch.ready}/runs`, { workflow: 'slowpoke', input: {} });
      const runId = body.runId as string;
      await eventually('compensated', () => h.of(runId).find((e) => e.event === 'RunCompensated'), {
        timeoutMs: 60_000,
      });
      expect(never.filter((c) => c.runId === runId).map((c) => c.attempt)).toEqual([1, 2, 3]);
      const failures = h.of(runId).filter((e) => e.event === 'StepFailed');
      expect(
        failures.map((e) => [
          e.value.attempt,
          (e.value.error as { errorClass: string }).errorClass,
          e.value.willRetry,
        ]),
      ).toEqual([
        [1, 'StepTimeoutError', true],
        [2, 'StepTimeoutError', true],
        [3, 'StepTimeoutError', false],
      ]);
    } finally {
      await h.teardown();
    }
  });

  it('identical starts with one Idempotency-Key, sent at once among starts with keys of their own (one produce, pipelined Redis commands), make one run; each other key its own run, answered again the same; bad requests get 400 and a bad webhook signature 401', async () => {
    const h = new OrchestratorHarness('orch-api');
    try {
      const [orch] = await Promise.all([h.startOrchestrator(), h.startWorker()]);
      await h.readEvents();
      const url = await orch.ready;
      const others = Array.from({ length: 6 }, (_, i) => `other-key-${i}`);
      const sent = await Promise.all(
        ['same-key', ...others, 'same-key', 'same-key'].map((key, i) =>
          post(
            `${url}/runs`,
            { workflow: 'three-step', input: key === 'same-key' ? { a: 1 } : { b: i } },
            { 'Idempotency-Key': key },
          ),
        ),
      );
      expect(sent.map((r) => r.status)).toEqual(sent.map(() => 202));
      const [r1, ...rest] = sent;
      const [r2, r3] = rest.slice(others.length);
      expect([r2.body.runId, r3.body.runId]).toEqual([r1.body.runId, r1.body.runId]);
      const otherRuns = rest.slice(0, others.length).map((r) => r.body.runId as string);
      expect(new Set([r1.body.runId, ...otherRuns]).size).toBe(others.length + 1);
      // Each key was bound to its own answer: a repeat gets that run again.
      const again = await Promise.all(
        others.map((key, i) =>
          post(`${url}/runs`, { workflow: 'three-step', input: { b: i + 1 } }, { 'Idempotency-Key': key }),
        ),
      );
      expect(again.map((r) => r.body.runId)).toEqual(otherRuns);
      const runId = r1.body.runId as string;
      await eventually('completed', () => h.of(runId).find((e) => e.event === 'RunCompleted'), {
        timeoutMs: 60_000,
      });
      expect(h.of(runId).filter((e) => e.event === 'RunStarted')).toHaveLength(1);

      const bad = await post(`${url}/runs`, { workflow: '', input: 'x', runId: 'has spaces' });
      expect(bad.status).toBe(400);
      expect((bad.body.errors as Array<{ path: string }>).map((e) => e.path).sort()).toEqual([
        'input',
        'runId',
        'workflow',
      ]);
      expect((await post(`${url}/runs`, { workflow: 'nope', input: {} })).status).toBe(400);
      expect((await fetch(`${url}/runs/run-does-not-exist`)).status).toBe(404);

      const payload = JSON.stringify({ from: 'webhook' });
      const now = new Date();
      const headers = {
        'webhook-id': 'd-1',
        'webhook-timestamp': `${Math.floor(now.getTime() / 1000)}`,
        'webhook-signature': new Webhook(TEST_WEBHOOK_SECRET).sign('d-1', now, payload),
      };
      const unsigned = await post(`${url}/webhooks/three-step`, payload, {
        ...headers,
        'webhook-signature': 'v1,AAAA',
      });
      expect(unsigned.status).toBe(401);
      const signed = await post(`${url}/webhooks/three-step`, payload, headers);
      expect(signed.status).toBe(202);
      await eventually(
        'webhook run completed',
        () => h.of(signed.body.runId as string).find((e) => e.event === 'RunCompleted'),
        { timeoutMs: 60_000 },
      );
      const started = h.events.items.filter((e) => e.event === 'RunStarted');
      // One run of the same key, one of each other key, and the signed webhook; the unsigned one started nothing.
      expect(started).toHaveLength(2 + others.length);
      const openapi = (await (await fetch(`${url}/docs/openapi.json`)).json()) as {
        paths: Record<string, unknown>;
      };
      expect(Object.keys(openapi.paths)).toEqual(
        expect.arrayContaining([
          '/runs',
          '/runs/batch',
          '/runs/{id}',
          '/runs/{id}/cancel',
          '/runs/{id}/retry',
          '/webhooks/{workflow}',
        ]),
      );
    } finally {
      await h.teardown();
    }
  });
});

describe('cron schedules across instances', () => {
  it('two instances start exactly one run per fire time', async () => {
    const h = new OrchestratorHarness('orch-cron');
    try {
      const [a, b] = await Promise.all([
        h.startOrchestrator({ ORCHESTRATOR_INSTANCE_ID: 'a', TEST_SCHEDULE: '1' }),
        h.startOrchestrator({ ORCHESTRATOR_INSTANCE_ID: 'b', TEST_SCHEDULE: '1' }),
        h.startWorker(),
      ]);
      await h.readEvents();
      const scheduled = () =>
        h.events.items.filter((e) => e.event === 'RunStarted' && e.value.runId.startsWith('sched-tick-'));
      await eventually('five fire times started', () => new Set(scheduled().map((e) => e.value.runId)).size, {
        until: (n) => n >= 5,
        timeoutMs: 30_000,
      });
      a.kill('SIGTERM');
      b.kill('SIGTERM');
      await Promise.all([a.exited, b.exited]);
      const runIds = scheduled().map((e) => e.value.runId);
      expect(runIds.length).toBe(new Set(runIds).size); // never two runs for one fire time
      const fireTimes = runIds.map((id) => Number(id.split('-').pop())).sort();
      expect(fireTimes.every((t) => t % 1000 === 0)).toBe(true);
    } finally {
      await h.teardown();
    }
  });
});

describe('the order saga example', () => {
  it('compensates the completed steps in reverse order for a failure at each step', async () => {
    const h = new OrchestratorHarness('orch-order');
    try {
      const [orch] = await Promise.all([h.startOrchestrator(), h.startWorker()]);
      await h.readEvents();
      const url = await orch.ready;
      const steps = ['reserve', 'charge', 'ship', 'confirm'];
      const runs = await Promise.all(
        steps.map((failAt) =>
          post(`${url}/runs`, {
            workflow: 'order-saga',
            input: { orderId: `o-${failAt}`, amount: 10, failAt },
          }),
        ),
      );
      for (const [i, failAt] of steps.entries()) {
        const runId = runs[i].body.runId as string;
        const end = await eventually(
          `order failing at ${failAt} ends`,
          () => h.of(runId).find((e) => TERMINAL_EVENTS.has(e.event)),
          { timeoutMs: 60_000 },
        );
        const completedBefore = steps.slice(0, i);
        const compensations = h
          .of(runId)
          .filter((e) => e.event === 'StepScheduled' && String(e.value.stepId).endsWith('.compensate'))
          .map((e) => String(e.value.stepId).replace('.compensate', ''));
        expect(compensations).toEqual([...completedBefore].reverse());
        expect(end!.event).toBe(completedBefore.length ? 'RunCompensated' : 'RunFailed');
      }
    } finally {
      await h.teardown();
    }
  });
});

describe('bad input', () => {
  it('undecodable bytes and a start whose input breaks the workflow input schema go to the DLQ (the API answers 400 with each issue), a start for an unknown workflow is parked, and the engine keeps going', async () => {
    const h = new OrchestratorHarness('orch-bad');
    try {
      const [orch] = await Promise.all([h.startOrchestrator(), h.startWorker()]);
      await h.readEvents();
      const url = await orch.ready;
      const { newMetadata } = await import('@keyflow/contracts');
      await h.codec.registerTopics(['wf.requests']);
      const producer = h.ns.kafka.producer();
      await producer.connect();
      // A StartRun as a producer other than the API could write it.
      const startRun = (runId: string, workflow: string, input: unknown) =>
        h.codec.encode('wf.requests', 'StartRun', {
          metadata: newMetadata('StartRun', { key: runId, correlationId: runId }),
          runId,
          workflow,
          workflowVersion: null,
          businessKey: 'b',
          input: JSON.stringify(input),
          idempotencyKey: null,
          trigger: 'test',
          parent: null,
        });
      const unknown = startRun('r-x', 'no-such-workflow', {});
      // Its input breaks the workflow's input schema (order-saga: amount is a number): refused by the engine too.
      const mistyped = startRun('r-typed', 'order-saga', { orderId: 'o-1', amount: 'ten' });
      await producer.send({
        topic: h.codec.physical('wf.requests'),
        messages: [
          { key: 'r-bad', value: Buffer.from('garbage') },
          { key: 'r-x', value: unknown },
          { key: 'r-typed', value: mistyped },
        ],
      });
      await producer.disconnect();
      const exploding = await post(`${url}/runs`, { workflow: 'fragile', input: { explode: true } });
      const refused = await post(`${url}/runs`, {
        workflow: 'order-saga',
        input: { amount: 'ten', orderId: 5 },
      });
      expect(refused.status).toBe(400);
      expect((refused.body.errors as Array<{ path: string }>).map((e) => e.path).sort()).toEqual([
        'input.amount',
        'input.orderId',
      ]);
      const { body } = await post(`${url}/runs`, { workflow: 'three-step', input: {} });
      await eventually(
        'a valid run still completes',
        () => h.of(body.runId as string).find((e) => e.event === 'RunCompleted'),
        { timeoutMs: 60_000 },
      );

      const { Collector } = await import('@keyflow/testing');
      const dlq = new Collector<{ key: string; errorClass: string; offset: string }>();
      const c = h.ns.kafka.consumer({ groupId: h.ns.groupId('dlq'), readUncommitted: false });
      await c.connect();
      await c.subscribe({ topic: `${h.codec.physical('wf.requests')}.dlq`, fromBeginning: true });
      await c.run({
        eachMessage: async ({ message }) =>
          dlq.push({
            key: message.key!.toString(),
            errorClass: message.headers!['x-dlq-error-class']!.toString(),
            offset: message.headers!['x-dlq-original-offset']!.toString(),
          }),
      });
      const records = await dlq.wait(3);
      await c.disconnect();
      expect(records.map((r) => [r.key, r.errorClass]).sort()).toEqual(
        [
          ['r-bad', 'MissingMagicByteError'],
          ['r-typed', 'InvalidRequestError'],
          [exploding.body.runId, 'DefinitionError'],
        ].sort(),
      );
      expect(h.of('r-typed')).toEqual([]);
      // The start of a workflow this instance does not have is kept (a newer deployment may have it): parked.
      const parked = await eventually('the unknown start parked', async () => {
        const r = await fetch(`${url}/runs/r-x`);
        return r.status === 200 ? ((await r.json()) as { status: string; parked?: unknown[] }) : undefined;
      });
      expect([parked?.status, parked?.parked?.length]).toEqual(['parked', 1]);
      // No deployment has that workflow: cancelling the parked run ends it, never started (the operator's way out).
      expect((await post(`${url}/runs/r-x/cancel`, { reason: 'typo' })).status).toBe(202);
      await eventually(
        'the parked run cancelled',
        async () => {
          const r = await fetch(`${url}/runs/r-x`);
          return ((await r.json()) as { status: string }).status;
        },
        { until: (status) => status === 'cancelled' },
      );
    } finally {
      await h.teardown();
    }
  });
});
