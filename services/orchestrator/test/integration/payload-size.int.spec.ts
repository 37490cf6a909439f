import { Pool } from 'pg';
import { PgBlobStore } from '@keyflow/blobs';
import { eventually } from '@keyflow/testing';
import { OrchestratorHarness, post } from './support';

jest.setTimeout(180_000);

const WORKER_FIXTURE = 'services/workers/test/fixtures/test-worker.ts';
const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const MB = 1024 * 1024;

/**
 * Payloads over the topics' max.message.bytes (issue "A real cluster, real producers, real sizes"): a real
 * orchestrator and a real worker sharing the PostgreSQL blob store. A 5 MB output goes through task.results, the
 * next command, wf.events and the wf.state snapshot by claim check; one over the store's own limit fails its step
 * with PAYLOAD_TOO_LARGE. Neither process restarts and both /health stay 200.
 */
describe('runs whose outputs exceed max.message.bytes', () => {
  const h = new OrchestratorHarness('payload');
  const schema = `kf_blobs_o${process.pid}_${Date.now().toString(36)}`;
  const table = h.ns.prefix.replace(/[^a-z0-9]/g, '_');
  const blobs = new PgBlobStore({ url: POSTGRES_URL, schema });
  const shared = {
    KEYFLOW_BLOB_STORE: 'postgres',
    KEYFLOW_BLOB_URL: POSTGRES_URL,
    KEYFLOW_BLOB_SCHEMA: schema,
  };
  let url: string;
  let workerUrl: string;
  beforeAll(async () => {
    // The run state holds the output and the next step's input: the orchestrator's claim check takes up to 32 MiB.
    url = await (await h.startOrchestrator({ ...shared, KEYFLOW_BLOB_MAX_BYTES: String(32 * MB) })).ready;
    workerUrl = await (
      await h.startWorker(
        {
          ...shared,
          KEYFLOW_BLOB_MAX_BYTES: String(8 * MB),
          TEST_TABLE_PREFIX: table,
          TEST_CREATE_TABLES: '1',
          WORKER_TASK_TYPES: 'big,seq',
        },
        WORKER_FIXTURE,
      )
    ).ready;
    await h.readEvents();
  });
  afterAll(async () => {
    await h.teardown();
    await blobs.close();
    const pg = new Pool({ connectionString: POSTGRES_URL, max: 1 });
    await pg.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    for (const t of ['exec', 'attempt', 'order', 'effect', 'charge'])
      await pg.query(`DROP TABLE IF EXISTS ${table}_${t}`).catch(() => undefined);
    await pg.end();
  });

  const run = async (id: string) =>
    (await (await fetch(`${url}/runs/${id}`)).json()) as Record<string, unknown>;
  const finished = (id: string) =>
    eventually(
      `run ${id} finished`,
      async () => {
        const r = await run(id);
        return ['completed', 'failed', 'compensated'].includes(String(r.status)) ? r : undefined;
      },
      { timeoutMs: 60_000 },
    );

  it('a run with a 5 MB step output completes through the claim check: result, next input, event and snapshot', async () => {
    const started = await post(`${url}/runs`, { workflow: 'big-output', input: { bytes: 5 * MB } });
    expect(started.status).toBe(202);
    const runId = started.body.runId as string;
    const r = (await finished(runId)) as {
      status: string;
      steps: Record<string, { output?: { data: string } }>;
    };
    expect(r.status).toBe('completed');
    // The read model restored the run from a snapshot whose state is a blob.
    expect(r.steps.make.output!.data).toHaveLength(5 * MB);
    const stepCompleted = await eventually('StepCompleted of make', () =>
      h.events.items.find(
        (e) => e.event === 'StepCompleted' && e.value.runId === runId && e.value.stepId === 'make',
      ),
    );
    expect(stepCompleted!.value.outputRef).toMatch(/^blob:events\//);
    const pg = new Pool({ connectionString: POSTGRES_URL, max: 1 });
    try {
      const kinds = await pg.query<{ kind: string }>(
        `select distinct split_part(key, '/', 1) as kind from ${schema}.blobs where key like $1`,
        [`%/${runId.replace(/[^A-Za-z0-9_.-]/g, '_')}/%`],
      );
      expect(kinds.rows.map((k) => k.kind).sort()).toEqual(['events', 'inputs', 'results', 'state']);
    } finally {
      await pg.end();
    }
    for (const u of [url, workerUrl]) expect((await fetch(`${u}/health`)).status).toBe(200);
  });

  it('an output over the claim check limit fails its step with PAYLOAD_TOO_LARGE, without a crash loop', async () => {
    const started = await post(`${url}/runs`, { workflow: 'big-output', input: { bytes: 10 * MB } });
    const runId = started.body.runId as string;
    const r = (await finished(runId)) as { status: string; error?: { code: string; stepId: string } };
    expect(r.status).toBe('failed');
    expect(r.error).toMatchObject({ errorClass: 'PayloadTooLargeError', stepId: 'make', retryable: false });
    const stepFailed = await eventually('StepFailed of make', () =>
      h.events.items.find((e) => e.event === 'StepFailed' && e.value.runId === runId),
    );
    expect(stepFailed!.value.error).toMatchObject({ errorClass: 'PayloadTooLargeError', retryable: false });
    for (const u of [url, workerUrl]) expect((await fetch(`${u}/health`)).status).toBe(200);
    expect(h.processes.every((p) => p.proc.exitCode === null)).toBe(true);
  });
});
