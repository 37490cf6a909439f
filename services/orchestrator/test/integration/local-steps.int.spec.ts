import Redis from 'ioredis';
import { eventually } from '@keyflow/testing';
import { OrchestratorHarness, post, type ServiceProcess } from './support';

jest.setTimeout(120_000);

const FIXTURE = 'services/orchestrator/test/fixtures/local-steps-orchestrator.ts';

/**
 * Local steps (`.local`, docs/workflows.md "Local steps"): a real orchestrator process runs them itself, with no
 * worker; each handler counts its starts and completions in Redis by idempotency key.
 */
describe('local steps (orchestrator process, no worker)', () => {
  const h = new OrchestratorHarness('local-steps');
  const redis = new Redis(h.ns.infra.redisUrl);
  const counts = h.ns.prefix;
  const env = (extra: Record<string, string> = {}) => ({
    LOCAL_COUNT_PREFIX: counts,
    ORCHESTRATOR_LOCAL_STEP_LEASE_MS: '1000',
    ...extra,
  });
  const count = async (what: 'started' | 'done', runId: string, step: string) =>
    Number((await redis.get(`${counts}:${what}:${runId}/${step}`)) ?? 0);
  const completed = (runId: string) =>
    eventually(`run ${runId} completed`, () => h.of(runId).find((e) => e.event === 'RunCompleted'), {
      timeoutMs: 60_000,
    });
  let orch: ServiceProcess;

  beforeAll(async () => {
    orch = await h.startOrchestrator(env(), FIXTURE);
    await h.readEvents();
  });
  afterAll(async () => {
    if (process.env.KEYFLOW_TEST_DEBUG)
      h.processes.forEach((p, i) => console.log(`--- process ${i}\n${p.logs.slice(-60).join('\n')}`));
    await h.teardown();
    redis.disconnect();
  });

  it('a workflow of three local steps completes with no worker running, each handler executed once', async () => {
    const url = await orch.ready;
    const { status, body } = await post(`${url}/runs`, { workflow: 'local-three', input: { n: 1 } });
    expect(status).toBe(202);
    const runId = body.runId as string;
    const done = await completed(runId);
    expect(JSON.parse(done!.value.output as string)).toEqual({ a: { n: 2 }, b: { n: 3 }, c: { n: 4 } });
    for (const step of ['a', 'b', 'c']) {
      expect(await count('started', runId, step)).toBe(1);
      expect(await count('done', runId, step)).toBe(1);
    }
    const results = h.of(runId).filter((e) => e.event === 'StepCompleted');
    expect(results.map((e) => e.value.stepId)).toEqual(['a', 'b', 'c']);
  });

  it('an orchestrator killed while a local step runs: the next owner runs it again (at least once), completed steps never', async () => {
    orch.kill('SIGKILL');
    await orch.exited;
    const held = await h.startOrchestrator(env({ LOCAL_HOLD_STEP: 'b' }), FIXTURE);
    const url = await held.ready;
    const { body } = await post(`${url}/runs`, { workflow: 'local-three', input: { n: 10 } });
    const runId = body.runId as string;
    await eventually(
      'step b started in the first orchestrator',
      async () => (await count('started', runId, 'b')) === 1,
    );
    held.kill('SIGKILL');
    await held.exited;
    await h.startOrchestrator(env(), FIXTURE);
    const done = await completed(runId);
    expect(JSON.parse(done!.value.output as string)).toEqual({ a: { n: 11 }, b: { n: 12 }, c: { n: 13 } });
    expect(await count('done', runId, 'a')).toBe(1); // recorded before the crash: not run again
    expect(await count('started', runId, 'b')).toBe(2); // never finished in the killed process: ran again
    expect(await count('done', runId, 'b')).toBe(1);
    expect(await count('done', runId, 'c')).toBe(1);
  });
});
