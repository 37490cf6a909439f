import { eventually } from '@keyflow/testing';
import { OrchestratorHarness, post } from './support';

jest.setTimeout(180_000);

const runOf = async (url: string, runId: string) => {
  const r = await fetch(`${url}/runs/${runId}`);
  return r.status === 200 ? ((await r.json()) as Record<string, unknown>) : undefined;
};

describe('client retries', () => {
  it('a signal sent twice with the same Idempotency-Key is answered twice alike and applied once; cancel and retry too', async () => {
    const h = new OrchestratorHarness('client-retry');
    try {
      const orch = await h.startOrchestrator();
      await h.readEvents();
      const url = await orch.ready;
      const started = await post(`${url}/runs`, { workflow: 'two-approvals', input: {} });
      expect(started.status).toBe(202);
      const runId = started.body.runId as string;
      await eventually('waiting for the first approval', () => runOf(url, runId), {
        until: (r) => r?.status === 'waiting',
        timeoutMs: 60_000,
      });

      const approve = () =>
        post(
          `${url}/runs/${runId}/signal`,
          { signal: 'approved', payload: { by: 'alice' } },
          { 'Idempotency-Key': 'alice-approves' },
        );
      const first = await approve();
      expect(first.status).toBe(202);
      await eventually('the first approval applied', () => runOf(url, runId), {
        until: (r) => (r?.steps as Record<string, { status: string }>)?.first?.status === 'completed',
      });
      // The client did not see the answer and sends the same request again.
      const again = await approve();
      expect(again).toEqual(first);
      // The same key with another request is refused, nothing sent.
      const reused = await post(
        `${url}/runs/${runId}/signal`,
        { signal: 'approved', payload: { by: 'mallory' } },
        { 'Idempotency-Key': 'alice-approves' },
      );
      expect(reused.status).toBe(422);
      expect(reused.body.code).toBe('IDEMPOTENCY_KEY_REUSED');

      // Even a duplicate that reaches the engine (the API's key store lost it: another API, a topic trigger) is
      // applied once: the engine remembers the request's id on the run.
      const { newMetadata, derivedEventId } = await import('@keyflow/contracts');
      await h.codec.registerTopics(['wf.requests']);
      const producer = h.ns.kafka.producer();
      await producer.connect();
      const eventId = (first.body as { requestId?: string }).requestId ?? derivedEventId(runId, 'missing');
      await producer.send({
        topic: h.codec.physical('wf.requests'),
        messages: [
          {
            key: runId,
            value: h.codec.encode('wf.requests', 'SignalRun', {
              metadata: newMetadata('SignalRun', { key: runId, correlationId: runId, eventId }),
              runId,
              signal: 'approved',
              payload: JSON.stringify({ by: 'alice' }),
            }),
          },
        ],
      });
      await producer.disconnect();
      await eventually(
        'the duplicate ignored as DUPLICATE_REQUEST',
        async () => (await fetch(`${url}/metrics`)).text(),
        {
          until: (m) => /orchestrator_inputs_ignored_total\{reason="DUPLICATE_REQUEST"[^}]*\} [1-9]/.test(m),
          timeoutMs: 30_000,
        },
      );
      const afterDuplicates = await runOf(url, runId);
      expect(afterDuplicates?.status).toBe('waiting');
      expect((afterDuplicates?.steps as Record<string, { status: string }>).second.status).toBe('waiting');
      expect(h.of(runId).filter((e) => e.event === 'StepCompleted')).toHaveLength(1);

      // A second, real approval completes the run; a cancel retried after that gets its first answer again.
      const bob = await post(
        `${url}/runs/${runId}/signal`,
        { signal: 'approved', payload: { by: 'bob' } },
        { 'Idempotency-Key': 'bob-approves' },
      );
      expect(bob.status).toBe(202);
      await eventually('completed', () => h.of(runId).find((e) => e.event === 'RunCompleted'), {
        timeoutMs: 30_000,
      });
      const cancel = () =>
        post(`${url}/runs/${runId}/cancel`, { reason: 'too late' }, { 'Idempotency-Key': 'c-1' });
      const refused = await cancel();
      expect(refused.status).toBe(409);
      expect(await cancel()).toEqual(refused);
    } finally {
      await h.teardown();
    }
  });
});
