import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg } from 'node:os';
import { DBOS, type WorkflowHandle } from '@dbos-inc/dbos-sdk';
import { Client } from 'pg';
import { Pool } from 'undici';
import { cpuParts, drive, parentPid, runEngine, stepInput, verify, versionOf, type Started } from './common';
import { countStep, forkRole, mergedCounts, serveRole } from './host';

/**
 * DBOS Transact: one app process (DBOS.launch with the system database on the stack's PostgreSQL, a fresh database
 * dropped at the end) registering the workflow of three `DBOS.runStep` steps, and serving HTTP as its docs show an
 * app doing: POST /runs starts the workflow (`DBOS.startWorkflow`, which records it in PostgreSQL before answering
 * 202), GET /runs/<id> answers with `handle.getResult()`. The client is this process.
 */
const threeStep = DBOS.registerWorkflow(
  async (input: { tag: string }) => {
    const runId = DBOS.workflowID!;
    let out: unknown = input;
    for (const k of [1, 2, 3] as const) {
      const previous = out;
      out = await DBOS.runStep(async () => (countStep(runId, k), stepInput(k, previous)), {
        name: `step${k}`,
      });
    }
    return out;
  },
  { name: 'threeStep' },
);

function appRole() {
  const handles = new Map<string, WorkflowHandle<unknown>>();
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      const answer = (status: number, json: unknown) =>
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(json));
      const reply = async () => {
        if (req.method === 'POST') {
          const { id, tag } = JSON.parse(body) as { id: string; tag: string };
          handles.set(id, await DBOS.startWorkflow(threeStep, { workflowID: id })({ tag }));
          return answer(202, { id });
        }
        const id = req.url!.slice('/runs/'.length);
        const output = await handles.get(id)!.getResult();
        handles.delete(id);
        answer(200, output);
      };
      reply().catch((e: unknown) => answer(500, { error: String(e) }));
    });
  });
  serveRole(
    async () => {
      DBOS.setConfig({ name: 'bench-peers', systemDatabaseUrl: process.env.PEER_DB_URL! });
      await DBOS.launch();
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
    async () => {
      server.close();
      await DBOS.shutdown();
    },
  );
}

async function bench() {
  const base = process.env.POSTGRES_URL;
  if (!base) throw new Error('POSTGRES_URL is not set: eval "$(infra/local/stack.sh env)"');
  const dbName = `bench_peers_${randomUUID().slice(0, 8)}`;
  const admin = new Client({ connectionString: base });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${dbName}`);
  try {
    return await measure(admin, new URL(dbName, base.replace(/\/[^/]*$/, '/')).toString());
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
    await admin.end();
  }
}

async function measure(admin: Client, dbUrl: string) {
  const show = async (k: string) => (await admin.query(`SHOW ${k}`)).rows[0][k] as string;
  const pgVersion = await show('server_version');
  const [fsync, syncCommit] = [await show('fsync'), await show('synchronous_commit')];
  const backend = (await admin.query('SELECT pg_backend_pid() AS p')).rows[0].p as number;
  const postmaster = parentPid(backend);
  const app = forkRole(__filename, { PEER_ROLE: 'app', PEER_DB_URL: dbUrl });
  const url = (await app.ready) as string;
  const http = new Pool(url);
  const request = async (method: 'POST' | 'GET', path: string, body?: unknown) => {
    const res = await http.request({
      method,
      path,
      headers: body ? { 'content-type': 'application/json' } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    const json = (await res.body.json()) as unknown;
    if (res.statusCode >= 300)
      throw new Error(`${method} ${path}: HTTP ${res.statusCode} ${JSON.stringify(json)}`);
    return json;
  };
  const start = async (tag: string): Promise<Started> => {
    const id = randomUUID();
    await request('POST', '/runs', { id, tag });
    return { id, tag, done: request('GET', `/runs/${id}`) };
  };
  const loadAvgBefore = loadavg();
  const { burst, load, runs, used } = await drive(start, () =>
    cpuParts(() => ({ engine: [app.proc.pid!], store: [postmaster] })),
  );
  const verified = await verify(runs, await mergedCounts([app]));
  await http.close();
  await app.stop();
  return {
    engine: 'DBOS Transact',
    version: `@dbos-inc/dbos-sdk ${versionOf('@dbos-inc/dbos-sdk')}, PostgreSQL ${pgVersion}`,
    layout: '1 app process (DBOS in it, HTTP to start and await), PostgreSQL',
    durability: `PostgreSQL: every workflow start and step output committed, fsync ${fsync}, synchronous_commit ${syncCommit}`,
    burst,
    load,
    cpu: used,
    verified,
    loadAvgBefore,
  };
}

if (process.env.PEER_ROLE === 'app') appRole();
else runEngine('DBOS Transact', bench);
