import { Collector, eventually, healthOf } from '@keyflow/testing';
import { newMetadata } from '@keyflow/contracts';
import { OrchestratorHarness, post, type ServiceProcess } from './support';

jest.setTimeout(240_000);

type RunView = Record<string, unknown> & { status: string; parked?: Array<{ kind: string }> };
const runOf = async (url: string, runId: string): Promise<RunView | undefined> => {
  const r = await fetch(`${url}/runs/${runId}`);
  return r.status === 200 ? ((await r.json()) as RunView) : undefined;
};

/** Waits until `url`'s orchestrator owns every one of the harness's 4 partitions. */
const ownsAll = (url: string) =>
  eventually('owns every partition', () => healthOf(url), {
    until: (h) => (h.body.partitions as number[] | undefined)?.length === 4,
    timeoutMs: 60_000,
  });

async function stop(p: ServiceProcess) {
  p.kill('SIGTERM');
  await p.exited;
}

describe('a rolling deploy', () => {
  it("an instance without a workflow parks its runs' inputs (signal, cancel, start) durably and visibly, past its bound to the DLQ; the next owner with it applies them in order", async () => {
    const h = new OrchestratorHarness('rolling');
    try {
      const a = await h.startOrchestrator({ ORCHESTRATOR_INSTANCE_ID: 'a' });
      await h.readEvents();
      const urlA = await a.ready;
      const ids: string[] = [];
      for (const n of [1, 2]) {
        const r = await post(
          `${urlA}/runs`,
          { workflow: 'approval', input: {} },
          { 'Idempotency-Key': `w${n}` },
        );
        expect(r.status).toBe(202);
        ids.push(r.body.runId as string);
      }
      const [signalled, cancelled] = ids;
      for (const id of ids)
        await eventually(`${id} waiting`, () => runOf(urlA, id), {
          until: (r) => r?.status === 'waiting',
          timeoutMs: 60_000,
        });

      // The old deployment (no `approval`) takes every partition.
      // It keeps at most one parked input per run (to see the bound at work).
      const b = await h.startOrchestrator({
        ORCHESTRATOR_INSTANCE_ID: 'b',
        TEST_OMIT_WORKFLOWS: 'approval',
        ORCHESTRATOR_PARKED_INPUTS_LIMIT: '1',
      });
      const urlB = await b.ready;
      await stop(a);
      await ownsAll(urlB);
      expect(
        (await post(`${urlB}/runs/${signalled}/signal`, { signal: 'approved', payload: 'ok' })).status,
      ).toBe(202);
      // Past the bound: to the DLQ, named, never dropped.
      expect(
        (await post(`${urlB}/runs/${signalled}/signal`, { signal: 'extra', payload: 'over' })).status,
      ).toBe(202);
      expect((await post(`${urlB}/runs/${cancelled}/cancel`, { reason: 'no longer needed' })).status).toBe(
        202,
      );
      // A StartRun of the workflow, as the new deployment's API writes it (the old one's API refuses it: 400).
      expect((await post(`${urlB}/runs`, { workflow: 'approval', input: {} })).status).toBe(400);
      const newRun = 'run-from-the-new-version';
      await h.codec.registerTopics(['wf.requests']);
      const producer = h.ns.kafka.producer();
      await producer.connect();
      await producer.send({
        topic: h.codec.physical('wf.requests'),
        messages: [
          {
            key: newRun,
            value: h.codec.encode('wf.requests', 'StartRun', {
              metadata: newMetadata('StartRun', { key: newRun, correlationId: newRun }),
              runId: newRun,
              workflow: 'approval',
              workflowVersion: 1,
              businessKey: newRun,
              input: '{}',
              idempotencyKey: null,
              trigger: 'api',
              parent: null,
            }),
          },
        ],
      });
      await producer.disconnect();

      // Parked, and visible: the run API, /health (degraded, naming the workflow@version), the gauge.
      const parkedSignal = await eventually('the signal parked', () => runOf(urlB, signalled), {
        until: (r) => (r?.parked?.length ?? 0) === 1,
      });
      expect(parkedSignal!.parked![0].kind).toBe('signal');
      expect(parkedSignal!.status).toBe('waiting');
      const parkedCancel = await eventually('the cancel parked', () => runOf(urlB, cancelled), {
        until: (r) => (r?.parked?.length ?? 0) === 1,
      });
      expect(parkedCancel!.parked![0].kind).toBe('cancel');
      const parkedStart = await eventually('the start parked', () => runOf(urlB, newRun), {
        until: (r) => (r?.parked?.length ?? 0) === 1,
      });
      expect(parkedStart!.status).toBe('parked');
      expect(parkedStart!.parked![0].kind).toBe('start');
      const health = await eventually('/health names the parked runs', () => healthOf(urlB), {
        until: (x) => x.body.degraded?.some((d) => d.code === 'INPUTS_PARKED' && /3 runs/.test(d.error)),
      });
      expect(health.status).toBe(200);
      expect(health.body.status).toBe('degraded');
      expect(health.body.degraded.find((d) => d.code === 'INPUTS_PARKED')!.error).toContain('approval@1');
      const dlq = new Collector<{ key: string; code: string }>();
      const reader = h.ns.kafka.consumer({ groupId: h.ns.groupId('dlq'), readUncommitted: false });
      await reader.connect();
      await reader.subscribe({ topic: `${h.codec.physical('wf.requests')}.dlq`, fromBeginning: true });
      await reader.run({
        eachMessage: async ({ message }) =>
          dlq.push({
            key: message.key!.toString(),
            code: message.headers!['x-dlq-error-code']?.toString() ?? '',
          }),
      });
      expect(await dlq.wait(1)).toEqual([{ key: signalled, code: 'PARKED_INPUTS_FULL' }]);
      await reader.disconnect();
      const metrics = await (await fetch(`${urlB}/metrics`)).text();
      expect(metrics).toMatch(/orchestrator_parked_inputs\{workflow="approval",version="1"[^}]*\} 3/);

      // The new deployment takes over: every parked input is applied, in order, nothing lost.
      const c = await h.startOrchestrator({ ORCHESTRATOR_INSTANCE_ID: 'c' });
      const urlC = await c.ready;
      await stop(b);
      await ownsAll(urlC);
      await eventually(
        'the signalled run completed',
        () => h.of(signalled).find((e) => e.event === 'RunCompleted'),
        {
          timeoutMs: 60_000,
        },
      );
      const end = await eventually(
        'the cancelled run cancelled',
        () => h.of(cancelled).find((e) => e.event === 'RunCancelled'),
        { timeoutMs: 60_000 },
      );
      expect(end!.value.reason).toBe('no longer needed');
      await eventually('the parked start started', () => h.of(newRun).find((e) => e.event === 'RunStarted'), {
        timeoutMs: 60_000,
      });
      const started = await eventually('the new run waits', () => runOf(urlC, newRun), {
        until: (r) => r?.status === 'waiting' && !r.parked?.length,
      });
      expect(started!.workflow).toBe('approval');
      await eventually('/health no longer degraded by parked inputs', () => healthOf(urlC), {
        until: (x) => !x.body.degraded?.some((d) => d.code === 'INPUTS_PARKED'),
      });
    } finally {
      await h.teardown();
    }
  });
});
