import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually } from '@keyflow/testing';
import { OrchestratorHarness, post } from './support';

jest.setTimeout(300_000);

const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

interface RunView {
  status: string;
  error?: { code?: string | null; message: string; retryable: boolean; stepId: string };
}

/**
 * A run's input is data, not authority: the GeoNames ETL's source, SQLite path and PostgreSQL URL must lie within the
 * roots and hosts the workers' settings allow (ETL_INPUT_ROOTS, ETL_SQLITE_ROOTS, ETL_POSTGRES_URLS), else the step
 * fails for good with a code, naming nothing of what lies beyond.
 */
describe('the GeoNames ETL confines run input to the workers’ allowed roots and hosts', () => {
  const h = new OrchestratorHarness('etl-confine');
  const dir = mkdtempSync(join(tmpdir(), 'kf-confine-'));
  const inputs = join(dir, 'inputs');
  const sinks = join(dir, 'sinks');
  const outside = join(dir, 'outside');
  let url: string;

  beforeAll(async () => {
    for (const d of [inputs, sinks, outside, join(inputs, 'sub')]) mkdirSync(d, { recursive: true });
    const city = JSON.stringify({
      name: 'Lyon',
      lat: 45.75,
      lng: 4.85,
      country: 'FR',
      admin1: '84',
      admin2: '69',
    });
    writeFileSync(join(inputs, 'ok.jsonl'), `${city}\n`);
    writeFileSync(join(outside, 'secret.jsonl'), `${city}\n`);
    symlinkSync(join(outside, 'secret.jsonl'), join(inputs, 'link.jsonl'));
    symlinkSync(outside, join(sinks, 'escape'));
    const orch = await h.startOrchestrator({}, 'examples/test-workloads/src/orchestrator.ts');
    url = await orch.ready;
    await h.startWorker({
      KEYFLOW_BLOB_DIR: join(dir, 'blobs'),
      ETL_INPUT_ROOTS: inputs,
      ETL_SQLITE_ROOTS: sinks,
      ETL_POSTGRES_URLS: POSTGRES_URL,
    });
  }, 180_000);
  afterAll(async () => {
    await h.teardown();
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  const run = async (input: Record<string, unknown>) => {
    const start = await post(`${url}/runs`, { workflow: 'geonames-etl', input });
    expect(start.status).toBe(202);
    const runId = start.body.runId as string;
    return eventually(
      `run ${runId} ended`,
      async () => {
        const r = await fetch(`${url}/runs/${runId}`);
        return r.status === 200 ? ((await r.json()) as RunView) : undefined;
      },
      { until: (v) => !!v && ['completed', 'failed', 'compensated'].includes(v.status), timeoutMs: 120_000 },
    );
  };
  const sqlite = (path: string) => ({ kind: 'sqlite', path, table: 'cities' });

  it('a source outside ETL_INPUT_ROOTS (a device, .., a symlink out, a directory) fails extract with SOURCE_NOT_ALLOWED, not retried', async () => {
    const refused = await Promise.all(
      [
        { source: '/dev/urandom', format: 'jsonl' },
        { source: join(inputs, '..', 'outside', 'secret.jsonl') },
        { source: join(inputs, 'link.jsonl') },
        { source: join(inputs, 'sub'), format: 'jsonl' },
        { source: join(outside, 'missing.jsonl') },
      ].map((i) => run({ ...i, sink: sqlite(join(sinks, 'a.sqlite')) })),
    );
    for (const v of refused) {
      expect(v!.status).toBe('failed');
      expect(v!.error).toMatchObject({ stepId: 'extract', code: 'SOURCE_NOT_ALLOWED', retryable: false });
      expect(v!.error!.message).toMatch(/ETL_INPUT_ROOTS/);
    }
  });

  it('a SQLite path outside ETL_SQLITE_ROOTS (absolute, or through a symlinked directory) fails with SINK_NOT_ALLOWED; inside, the run completes', async () => {
    const source = join(inputs, 'ok.jsonl');
    for (const path of [
      join(outside, 'x.sqlite'),
      join(sinks, 'escape', 'x.sqlite'),
      join(sinks, '..', 'y.sqlite'),
    ]) {
      const v = await run({ source, sink: sqlite(path) });
      expect(v!.status).not.toBe('completed');
      expect(v!.error).toMatchObject({ code: 'SINK_NOT_ALLOWED', retryable: false });
      expect(v!.error!.message).toMatch(/ETL_SQLITE_ROOTS/);
    }
    expect((await run({ source, sink: sqlite(join(sinks, 'ok.sqlite')) }))!.status).toBe('completed');
  });

  it('a PostgreSQL URL not in ETL_POSTGRES_URLS fails with SINK_NOT_ALLOWED, and the error says nothing of that server', async () => {
    const source = join(inputs, 'ok.jsonl');
    for (const target of [
      'postgres://postgres@127.0.0.1:1/test',
      'postgres://postgres@127.0.0.1:5432/kf_other_db',
    ]) {
      const v = await run({ source, sink: { kind: 'postgres', url: target, table: 'cities' } });
      expect(v!.status).not.toBe('completed');
      expect(v!.error).toMatchObject({ code: 'SINK_NOT_ALLOWED', retryable: false });
      expect(v!.error!.message).toMatch(/ETL_POSTGRES_URLS/);
      expect(v!.error!.message).not.toMatch(/ECONNREFUSED|does not exist|connect/i);
    }
  });
});
