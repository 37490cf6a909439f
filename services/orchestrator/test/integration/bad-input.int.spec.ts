import Redis from 'ioredis';
import { Webhook } from 'standardwebhooks';
import { newMetadata } from '@keyflow/contracts';
import { eventually } from '@keyflow/testing';
import { OrchestratorHarness, post } from './support';

/** Standard Webhooks secrets (whsec_ + base64 key), one per workflow. */
const secretOf = (workflow: string) =>
  `whsec_${Buffer.from(`${workflow}-secret-0123456789abcdef`).toString('base64')}`;

function signed(workflow: string, id: string, payload: string, at = new Date()) {
  return {
    'webhook-id': id,
    'webhook-timestamp': `${Math.floor(at.getTime() / 1000)}`,
    'webhook-signature': new Webhook(secretOf(workflow)).sign(id, at, payload),
  };
}

describe('bad input at the HTTP doors', () => {
  const h = new OrchestratorHarness('orch-bad-input');
  let url: string;

  beforeAll(async () => {
    const orch = await h.startOrchestrator({
      WEBHOOKS_ENABLED: 'true',
      WEBHOOK_SECRETS: JSON.stringify({
        'three-step': secretOf('three-step'),
        approval: secretOf('approval'),
      }),
      ORCHESTRATOR_SIGNAL_BUFFER_LIMIT: '3',
    });
    await h.readEvents();
    url = await orch.ready;
  }, 120_000);
  afterAll(() => h.teardown(), 60_000);

  it('the same Idempotency-Key with a different body answers 422 naming both fingerprints; the first run keeps its body', async () => {
    const key = { 'Idempotency-Key': `order-${h.ns.prefix}` };
    const first = await post(
      `${url}/runs`,
      { workflow: 'three-step', input: { order: 'o-1', amount: 5 } },
      key,
    );
    expect(first.status).toBe(202);
    // Key order does not matter: the canonical form of the same request is the same.
    const again = await post(
      `${url}/runs`,
      { input: { amount: 5, order: 'o-1' }, workflow: 'three-step' },
      key,
    );
    expect(again.status).toBe(202);
    expect(again.body.runId).toBe(first.body.runId);
    const other = await post(
      `${url}/runs`,
      { workflow: 'three-step', input: { order: 'o-1', amount: 500 } },
      key,
    );
    expect(other.status).toBe(422);
    expect(other.body).toMatchObject({
      code: 'IDEMPOTENCY_KEY_REUSED',
      runId: first.body.runId,
      fingerprints: {
        stored: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
        request: expect.stringMatching(/^sha256:[0-9a-f]{64}$/),
      },
    });
    const fp = other.body.fingerprints as { stored: string; request: string };
    expect(fp.stored).not.toBe(fp.request);
    const started = await eventually('RunStarted', () =>
      h.of(first.body.runId as string).find((e) => e.event === 'RunStarted'),
    );
    expect(JSON.parse(started!.value.input as string)).toEqual({ order: 'o-1', amount: 5 });
  });

  it('after the key expires, the same key with another body starts a new run with that body (never a dropped duplicate)', async () => {
    const key = `expiring-${h.ns.prefix}`;
    const first = await post(
      `${url}/runs`,
      { workflow: 'three-step', input: { amount: 5 } },
      { 'Idempotency-Key': key },
    );
    expect(first.status).toBe(202);
    // Stand-in for IDEMPOTENCY_KEY_TTL_MS passing: this test's own key, in this test's namespace.
    const redis = new Redis(h.ns.infra.redisUrl);
    expect(await redis.del(`${h.prefix}keyflow:api:idempotency:three-step:${key}`)).toBe(1);
    await redis.quit();
    const later = await post(
      `${url}/runs`,
      { workflow: 'three-step', input: { amount: 500 } },
      { 'Idempotency-Key': key },
    );
    expect(later.status).toBe(202);
    expect(later.body.runId).not.toBe(first.body.runId);
    const started = await eventually('RunStarted', () =>
      h.of(later.body.runId as string).find((e) => e.event === 'RunStarted'),
    );
    expect(JSON.parse(started!.value.input as string)).toEqual({ amount: 500 });
  });

  it('concurrent starts with one key give one run; with different bodies exactly one is accepted', async () => {
    const same = await Promise.all(
      [0, 1, 2, 3].map(() =>
        post(
          `${url}/runs`,
          { workflow: 'three-step', input: { n: 1 } },
          { 'Idempotency-Key': `${h.ns.prefix}-same` },
        ),
      ),
    );
    expect(same.map((r) => r.status)).toEqual([202, 202, 202, 202]);
    expect(new Set(same.map((r) => r.body.runId)).size).toBe(1);
    const differing = await Promise.all(
      [1, 2, 3, 4].map((n) =>
        post(
          `${url}/runs`,
          { workflow: 'three-step', input: { n } },
          { 'Idempotency-Key': `${h.ns.prefix}-race` },
        ),
      ),
    );
    expect(differing.map((r) => r.status).sort()).toEqual([202, 422, 422, 422]);
  });

  it('a caller cannot choose a run id in the scheduler name space', async () => {
    const r = await post(`${url}/runs`, {
      workflow: 'three-step',
      input: {},
      runId: `sched-tick-${Date.now() + 60_000}`,
    });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual([
      { path: 'runId', message: 'the prefix sched- is reserved for scheduled runs' },
    ]);
  });

  it('a webhook signs id, timestamp and body: a replay, a stale timestamp and another workflow are refused', async () => {
    const payload = JSON.stringify({ from: 'webhook' });
    const id = `msg_${h.ns.prefix}`;
    const ok = await post(`${url}/webhooks/three-step`, payload, signed('three-step', id, payload));
    expect(ok.status).toBe(202);
    const replay = await post(`${url}/webhooks/three-step`, payload, signed('three-step', id, payload));
    expect(replay.status).toBe(409);
    expect(replay.body).toMatchObject({ code: 'WEBHOOK_DELIVERY_SEEN', runId: ok.body.runId });
    const stale = await post(
      `${url}/webhooks/three-step`,
      payload,
      signed('three-step', `${id}-old`, payload, new Date(Date.now() - 10 * 60_000)),
    );
    expect(stale.status).toBe(401);
    expect(stale.body).toMatchObject({
      code: 'WEBHOOK_SIGNATURE_INVALID',
      message: 'invalid webhook signature: Message timestamp too old',
    });
    const elsewhere = await post(
      `${url}/webhooks/approval`,
      payload,
      signed('three-step', `${id}-x`, payload),
    );
    expect(elsewhere.status).toBe(401);
    expect(elsewhere.body.message).toBe('invalid webhook signature: No matching signature found');
    const noSecret = await post(`${url}/webhooks/payment`, payload, signed('payment', `${id}-p`, payload));
    expect(noSecret.status).toBe(404);
    const started = h.events.items.filter((e) => e.event === 'RunStarted' && e.value.runId === ok.body.runId);
    expect(started.length).toBeLessThanOrEqual(1);
  });

  it('signals buffered for a run are bounded: past the limit the API answers 429 naming it', async () => {
    const start = await post(`${url}/runs`, { workflow: 'approval', input: {} });
    const runId = start.body.runId as string;
    await eventually(
      'run visible',
      async () => (await fetch(`${url}/runs/${runId}`)).status === 200 || undefined,
    );
    for (let i = 0; i < 3; i++)
      expect((await post(`${url}/runs/${runId}/signal`, { signal: `other-${i}`, payload: i })).status).toBe(
        202,
      );
    await eventually('three buffered', async () => {
      const s = (await (await fetch(`${url}/runs/${runId}`)).json()) as { signals: Record<string, unknown> };
      return Object.keys(s.signals).length === 3 || undefined;
    });
    const over = await post(`${url}/runs/${runId}/signal`, { signal: 'other-3', payload: 3 });
    expect(over.status).toBe(429);
    expect(over.body).toMatchObject({ code: 'SIGNAL_BUFFER_FULL', limit: 3 });
    expect((await post(`${url}/runs/${runId}/signal`, { signal: 'approved', payload: 'yes' })).status).toBe(
      202,
    );
    await eventually('completed', () => h.of(runId).find((e) => e.event === 'RunCompleted'));
  });
  it('a cancel or terminate of a run that has ended answers 409 RUN_ENDED (not an "accepted" the engine then ignores)', async () => {
    const runId = (await post(`${url}/runs`, { workflow: 'approval', input: {} })).body.runId as string;
    await eventually(
      'run visible',
      async () => (await fetch(`${url}/runs/${runId}`)).status === 200 || undefined,
    );
    expect((await post(`${url}/runs/${runId}/signal`, { signal: 'approved', payload: 'yes' })).status).toBe(
      202,
    );
    await eventually('completed in the view', async () => {
      const s = (await (await fetch(`${url}/runs/${runId}`)).json()) as { status: string };
      return s.status === 'completed' || undefined;
    });
    for (const action of ['cancel', 'terminate']) {
      const r = await post(`${url}/runs/${runId}/${action}`, { reason: 'too late' });
      expect(r.status).toBe(409);
      expect(r.body).toMatchObject({ code: 'RUN_ENDED', status: 'completed' });
    }
    expect(h.of(runId).filter((e) => e.event === 'RunCancelled')).toEqual([]);
  });

  it('signals written past the limit by another path (straight to wf.requests) are rejected by the engine, and the buffer does not grow', async () => {
    const start = await post(`${url}/runs`, { workflow: 'approval', input: {} });
    const runId = start.body.runId as string;
    await h.codec.registerTopics(['wf.requests']);
    const producer = h.ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const signal = (name: string) => ({
      key: runId,
      value: h.codec.encode('wf.requests', 'SignalRun', {
        metadata: newMetadata('SignalRun', { key: runId, correlationId: runId }),
        runId,
        signal: name,
        payload: 'null',
      }),
    });
    // Six distinct signals at once, past the API's check; then the one the run waits for.
    await producer.send({
      topic: h.codec.physical('wf.requests'),
      acks: -1,
      messages: [...[0, 1, 2, 3, 4, 5].map((i) => signal(`flood-${i}`)), signal('approved')],
    });
    await producer.disconnect();
    await eventually('completed', () => h.of(runId).find((e) => e.event === 'RunCompleted'));
    const s = await eventually('final state', async () => {
      const r = (await (await fetch(`${url}/runs/${runId}`)).json()) as {
        status: string;
        signals: Record<string, unknown>;
      };
      return r.status === 'completed' ? r : undefined;
    });
    expect(Object.keys(s!.signals)).toEqual(['flood-0', 'flood-1', 'flood-2']);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/inputs_ignored_total\{[^}]*reason="SIGNAL_BUFFER_FULL"[^}]*\} 3\b/);
  });
});
