import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Pool } from 'pg';
import { Kafka, logLevel } from '@keyflow/kafka';
import { EventCodec } from '@keyflow/contracts';
import { eventually } from '@keyflow/testing';
import {
  etlDedupe,
  etlExtract,
  etlLoad,
  etlReport,
  etlTransform,
  readDefaultCities,
} from '@keyflow/example-geonames-etl';
import { startService } from './support';

jest.setTimeout(300_000);

const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const RECORDS = 20_000;

type Report = {
  read: number;
  loaded: number;
  rejected: number;
  duplicates: number;
  rejectsByReason: Record<string, number>;
  byCountry: Record<string, number>;
  byRegion: Record<string, number>;
  balanced: boolean;
  sinkMatches: boolean;
  sink: { rows: number; checksum: string };
};

/**
 * Blobs shared across hosts (issue "A real cluster, real producers, real sizes"): two worker processes with their
 * own local blob directories stand for two hosts; with the PostgreSQL blob store the GeoNames ETL runs with extract
 * on one and transform and load on the other, and reports what a single-process run reports.
 */
describe('the GeoNames ETL across two hosts sharing the PostgreSQL blob store', () => {
  const dir = mkdtempSync(join(tmpdir(), 'claim-etl-'));
  const tag = randomBytes(3).toString('hex');
  const schema = `kf_blobs_e2e_${tag}`;
  afterAll(async () => {
    rmSync(dir, { recursive: true, force: true });
    const pg = new Pool({ connectionString: POSTGRES_URL, max: 1 });
    await pg.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pg.end();
  });

  const input = join(dir, 'cities.jsonl');
  beforeAll(async () => {
    const lines: string[] = [];
    for await (const r of readDefaultCities()) {
      lines.push(JSON.stringify(r));
      if (lines.length === RECORDS) break;
    }
    writeFileSync(input, lines.join('\n') + '\n');
  });

  /** Starts an orchestrator and the given workers, runs the ETL over `input` into a new SQLite file, stops them. */
  async function run(
    name: string,
    workers: Array<Record<string, string>>,
    shared: Record<string, string>,
  ): Promise<{ report: Report; ranBy: Record<string, string[]> }> {
    const p = `claim-${tag}-${name}.`;
    const env = {
      KEYFLOW_TOPIC_PREFIX: p,
      ORCHESTRATOR_GROUP_ID: `${p}orchestrator`,
      WORKER_GROUP_ID: `${p}workers`,
      // The workers read and write only where these allow (docs/guarantees/etl-run-input.md).
      ETL_INPUT_ROOTS: dir,
      ETL_SQLITE_ROOTS: dir,
      ...shared,
    };
    const orch = startService('examples/geonames-etl/src/orchestrator.ts', env, 'orchestrator ready');
    const ws = workers.map((w) =>
      startService('examples/geonames-etl/src/worker.ts', { ...env, ...w }, 'worker ready'),
    );
    const all = [orch, ...ws];
    try {
      const url = await orch.ready;
      await Promise.all(ws.map((w) => w.ready));
      const res = await fetch(`${url}/runs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          workflow: 'geonames-etl',
          input: {
            source: input,
            chunkSize: 1000,
            sink: { kind: 'sqlite', path: join(dir, `${name}.sqlite`) },
          },
        }),
      });
      const { runId } = (await res.json()) as { runId: string };
      const done = await eventually(
        `${name} run finished`,
        async () =>
          (await fetch(`${url}/runs/${runId}`)).json() as Promise<{ status: string; output?: Report }>,
        {
          until: (r) => ['completed', 'failed', 'compensated'].includes(r.status),
          timeoutMs: 240_000,
          intervalMs: 500,
        },
      );
      expect(done.status).toBe('completed');
      // Which process ran each step: the workerId (host/pid) of every TaskCompleted of the run, from task.results.
      const ranBy: Record<string, Set<string>> = {};
      const codec = new EventCodec({ registryUrl: process.env.SCHEMA_REGISTRY_URL!, topicPrefix: p });
      const kafka = new Kafka({ brokers: process.env.KAFKA_BROKERS!.split(','), logLevel: logLevel.NOTHING });
      const c = kafka.consumer({ groupId: `${p}ran-by`, maxWaitTimeInMs: 100 });
      await codec.registerTopics(['task.results']);
      await c.connect();
      await c.subscribe({ topic: codec.physical('task.results'), fromBeginning: true });
      await c.run({
        eachMessage: async ({ topic, partition, message }) => {
          const d = await codec.decode('task.results', message.value, {
            topic,
            partition,
            offset: message.offset,
          });
          if (d.event !== 'TaskCompleted' || d.value.runId !== runId) return;
          const pid = d.value.workerId.split('/').pop()!;
          (ranBy[d.value.taskType] ??= new Set()).add(
            `worker${ws.findIndex((w) => String(w.proc.pid) === pid)}`,
          );
        },
      });
      await eventually('the report step in task.results', () => ranBy[etlReport.type]);
      await c.disconnect();
      return {
        report: done.output!,
        ranBy: Object.fromEntries(Object.entries(ranBy).map(([t, s]) => [t, [...s].sort()])),
      };
    } finally {
      all.forEach((s) => s.proc.kill('SIGTERM'));
      await Promise.all(all.map((s) => s.exited));
    }
  }

  it('extract on one process and load on another (separate local dirs) give the single-process report', async () => {
    const single = await run('single', [{ KEYFLOW_BLOB_DIR: join(dir, 'single-blobs') }], {});
    const hostA = join(dir, 'host-a');
    const hostB = join(dir, 'host-b');
    const pgStore = {
      KEYFLOW_BLOB_STORE: 'postgres',
      KEYFLOW_BLOB_URL: POSTGRES_URL,
      KEYFLOW_BLOB_SCHEMA: schema,
    };
    // Host A extracts, dedupes and reports; host B transforms and loads: every chunk crosses hosts twice.
    const two = await run(
      'two',
      [
        {
          KEYFLOW_BLOB_DIR: hostA,
          WORKER_TASK_TYPES: [etlExtract, etlDedupe, etlReport].map((t) => t.type).join(),
        },
        { KEYFLOW_BLOB_DIR: hostB, WORKER_TASK_TYPES: [etlTransform, etlLoad].map((t) => t.type).join() },
      ],
      pgStore,
    );
    // Recorded from task.results: extract (and dedupe, report) ran on process 0, transform and load on process 1.
    expect(two.ranBy).toEqual({
      [etlExtract.type]: ['worker0'],
      [etlTransform.type]: ['worker1'],
      [etlDedupe.type]: ['worker0'],
      [etlLoad.type]: ['worker1'],
      [etlReport.type]: ['worker0'],
    });
    for (const r of [single.report, two.report]) {
      expect(r.balanced).toBe(true);
      expect(r.sinkMatches).toBe(true);
      expect(r.read).toBe(RECORDS);
    }
    const same = (r: Report) => ({
      read: r.read,
      loaded: r.loaded,
      rejected: r.rejected,
      duplicates: r.duplicates,
      rejectsByReason: r.rejectsByReason,
      byCountry: r.byCountry,
      byRegion: r.byRegion,
      rows: r.sink.rows,
      checksum: r.sink.checksum,
    });
    expect(same(two.report)).toEqual(same(single.report));
    // Nothing went to either host's local directory: the chunks extract wrote on A were read on B from PostgreSQL.
    const files = (d: string) => {
      try {
        return readdirSync(d, { recursive: true });
      } catch {
        return [];
      }
    };
    expect(files(hostA)).toEqual([]);
    expect(files(hostB)).toEqual([]);
    const pg = new Pool({ connectionString: POSTGRES_URL, max: 1 });
    try {
      const kinds = await pg.query<{ kind: string; n: number }>(
        `select split_part(key, '/', 3) as kind, count(*)::int as n from ${schema}.blobs where key like 'runs/%' group by 1 order by 1`,
      );
      // raw chunks (written by extract on A, read by transform on B), enriched, unique (read by load on B), report.
      expect(kinds.rows.map((k) => k.kind)).toEqual(expect.arrayContaining(['enriched', 'raw', 'unique']));
      expect(kinds.rows.find((k) => k.kind === 'raw')!.n).toBe(RECORDS / 1000);
    } finally {
      await pg.end();
    }
  });
});
