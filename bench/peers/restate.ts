import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import * as clients from '@restatedev/restate-sdk-clients';
import { cpuParts, drive, runEngine, stepInput, verify, versionOf, type Started } from './common';
import { countStep, forkRole, mergedCounts, serveRole } from './host';

/**
 * Restate: the server binary of the npm package `@restatedev/restate-server` (one node, its defaults, a fresh data
 * directory removed at the end, free ports on 127.0.0.1), and one SDK service process (`restate.serve`, HTTP/2)
 * with a workflow whose three steps are `ctx.run` actions, registered through the admin API. The client submits
 * each run with the ingress client (`workflowSubmit`) and awaits it with `workflowAttach`.
 */
const threeStep = restate.workflow({
  name: 'threeStep',
  handlers: {
    run: async (ctx: restate.WorkflowContext, input: { tag: string }) => {
      const runId = ctx.key;
      let out: unknown = input;
      for (const k of [1, 2, 3] as const) {
        const previous = out;
        out = await ctx.run(`step${k}`, async () => (countStep(runId, k), stepInput(k, previous)));
      }
      return out;
    },
  },
});

function serviceRole() {
  serveRole(
    async () => restate.serve({ services: [threeStep], port: 0 }),
    async () => undefined,
  );
}

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });

const binary = () =>
  require.resolve(`@restatedev/restate-server-${process.platform}-${process.arch}/bin/restate-server`);

/** Starts the server; resolves once its ingress and admin API answer. */
async function startServer(dir: string) {
  const [ingress, admin, fabric] = [await freePort(), await freePort(), await freePort()];
  const proc = spawn(binary(), ['--no-logo', '--base-dir', dir, '--listen-mode', 'tcp'], {
    env: {
      ...process.env,
      RESTATE_INGRESS__BIND_ADDRESS: `127.0.0.1:${ingress}`,
      RESTATE_ADMIN__BIND_ADDRESS: `127.0.0.1:${admin}`,
      RESTATE_BIND_ADDRESS: `127.0.0.1:${fabric}`,
      // Its version check and telemetry reach outside, which this machine does not.
      RESTATE_DISABLE_TELEMETRY: 'true',
      RESTATE_LOG_FILTER: 'error',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const urls = { ingress: `http://127.0.0.1:${ingress}`, admin: `http://127.0.0.1:${admin}` };
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`restate-server exited (code ${proc.exitCode})`);
    const ok = await fetch(`${urls.ingress}/restate/health`).then(
      (r) => r.ok,
      () => false,
    );
    const adminOk = await fetch(`${urls.admin}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok && adminOk) break;
    if (i > 600) throw new Error('restate-server not ready after 60 s');
    await new Promise((r) => setTimeout(r, 100));
  }
  return { proc, urls };
}

async function bench() {
  const dir = mkdtempSync(join(tmpdir(), 'bench-peers-restate-'));
  const server = await startServer(dir).catch((e: unknown) => {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  });
  const service = forkRole(__filename, { PEER_ROLE: 'service' });
  try {
    const port = (await service.ready) as number;
    const reg = await fetch(`${server.urls.admin}/deployments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ uri: `http://127.0.0.1:${port}` }),
    });
    if (!reg.ok) throw new Error(`registering the deployment: HTTP ${reg.status} ${await reg.text()}`);
    const ingress = clients.connect({ url: server.urls.ingress });
    const start = async (tag: string): Promise<Started> => {
      const id = `run-${tag}-${Date.now()}`;
      const wf = ingress.workflowClient<typeof threeStep>({ name: 'threeStep' }, id);
      await wf.workflowSubmit({ tag });
      return { id, tag, done: wf.workflowAttach() };
    };
    const loadAvgBefore = loadavg();
    const { burst, load, runs, used } = await drive(start, () =>
      cpuParts(() => ({ engine: [server.proc.pid!], workers: [service.proc.pid!] })),
    );
    const verified = await verify(runs, await mergedCounts([service]));
    return {
      engine: 'Restate',
      version: `restate-server ${versionOf('@restatedev/restate-server')}, @restatedev/restate-sdk ${versionOf('@restatedev/restate-sdk')}`,
      layout:
        '1 restate-server (single node: its log, partition store and ingress in it), 1 SDK service process',
      durability:
        'its own log and state on local disk (RocksDB, WAL fsync on: its defaults, replication 1; one node)',
      burst,
      load,
      cpu: used,
      verified,
      loadAvgBefore,
    };
  } finally {
    await service.stop();
    await new Promise<void>((r) => (server.proc.once('exit', () => r()), server.proc.kill('SIGTERM')));
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.env.PEER_ROLE === 'service') serviceRole();
else runEngine('Restate', bench);
