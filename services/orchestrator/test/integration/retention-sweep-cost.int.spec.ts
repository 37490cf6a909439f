import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256 } from '@keyflow/blobs';
import { eventually } from '@keyflow/testing';
import { distinctEvents, OrchestratorHarness, post, type ServiceProcess } from './support';

jest.setTimeout(300_000);

const UNRELATED_BLOBS = 20_000;
const ENDED_RUNS = 100;

/**
 * Forgetting ended runs costs what those runs own: with a blob store full of other blobs, a retention sweep neither
 * stalls the partitions it works on (new runs keep completing) nor keeps the process from stopping (issue 39,
 * fault 1: every forgotten run scanned every blob of the store under its partition's lock).
 */
describe('the retention sweep on a large blob store', () => {
  let h: OrchestratorHarness;
  let orch: ServiceProcess;
  let url: string;
  let dir: string;

  beforeAll(async () => {
    // 20,000 blobs of other runs, as the fs store lays them out (bytes + `.meta/<key>.json`).
    dir = mkdtempSync(join(tmpdir(), 'keyflow-sweep-cost-'));
    mkdirSync(join(dir, '.meta', 'results', 'others'), { recursive: true });
    mkdirSync(join(dir, 'results', 'others'), { recursive: true });
    const bytes = Buffer.from('{"other":true}');
    for (let i = 0; i < UNRELATED_BLOBS; i++) {
      const key = `results/others/${i}`;
      writeFileSync(join(dir, key), bytes);
      const info = { key, sizeBytes: bytes.length, sha256: sha256(bytes), createdAt: 0, expiresAt: null };
      writeFileSync(join(dir, '.meta', `${key}.json`), JSON.stringify(info));
    }
    h = new OrchestratorHarness('sweep-cost');
    orch = await h.startOrchestrator({
      KEYFLOW_BLOB_DIR: dir,
      ORCHESTRATOR_RUN_RETENTION_MS: '1000',
      ORCHESTRATOR_RETENTION_SWEEP_MS: '200',
    });
    url = await orch.ready;
    await h.startWorker({ WORKER_TASK_TYPES: 'echo', KEYFLOW_BLOB_DIR: dir });
    await h.readEvents();
  });
  afterAll(async () => {
    await h?.teardown();
    rmSync(dir, { recursive: true, force: true });
  });

  const completed = (ids: string[]) => {
    const done = new Set(
      distinctEvents(h.events)
        .filter((e) => e.event === 'RunCompleted')
        .map((e) => e.value.runId),
    );
    return ids.filter((id) => done.has(id)).length;
  };

  it('runs started while ended runs are being forgotten complete within 20 s on every partition', async () => {
    const ended: string[] = [];
    for (let i = 0; i < ENDED_RUNS; i++)
      ended.push((await post(`${url}/runs`, { workflow: 'three-step', input: {} })).body.runId as string);
    await eventually('the runs to forget completed', () => completed(ended), {
      until: (n) => n === ENDED_RUNS,
      timeoutMs: 120_000,
    });
    await eventually(
      'the sweep is forgetting them (the first one answers 404)',
      async () => (await fetch(`${url}/runs/${ended[0]}`)).status,
      { until: (s) => s === 404, timeoutMs: 30_000, intervalMs: 100 },
    );
    const probes: string[] = [];
    for (let i = 0; i < 8; i++)
      probes.push((await post(`${url}/runs`, { workflow: 'three-step', input: {} })).body.runId as string);
    await eventually('every probe run completed', () => completed(probes), {
      until: (n) => n === probes.length,
      timeoutMs: 20_000,
    });
  });

  it('SIGTERM during the sweeps stops the orchestrator within 15 s', async () => {
    const more: string[] = [];
    for (let i = 0; i < ENDED_RUNS; i++)
      more.push((await post(`${url}/runs`, { workflow: 'three-step', input: {} })).body.runId as string);
    await eventually('the new runs completed', () => completed(more), {
      until: (n) => n === ENDED_RUNS,
      timeoutMs: 120_000,
    });
    await eventually(
      'the sweep is forgetting them',
      async () => (await fetch(`${url}/runs/${more[0]}`)).status,
      { until: (s) => s === 404, timeoutMs: 30_000, intervalMs: 100 },
    );
    const t0 = Date.now();
    orch.kill('SIGTERM');
    const code = await Promise.race([
      orch.exited,
      new Promise((r) => setTimeout(() => r('still running'), 15_000)),
    ]);
    expect({ code, ms: Date.now() - t0 < 15_000 }).toEqual({ code: 0, ms: true });
  });
});
