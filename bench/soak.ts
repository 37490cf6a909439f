import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Command } from 'commander';
import { Kafka, logLevel } from '@keyflow/kafka';
import { Pool as PgPool } from 'pg';
import { Pool } from 'undici';
import { FsBlobStore } from '@keyflow/blobs';
import { EventCodec } from '@keyflow/contracts';
import { pct, readLifecycle, ROOT, spawnService, stopSpawned } from './support';
import { SOAK_SIGNAL, soakStep } from './soak/workflows';
import { Topic } from '@keyflow/schemas';

/**
 * The week-one soak (issue 39): time, deploys and client retries together, on the local stack.
 *  - retention `--retention-ms` (30 s) and a sweep every `--sweep-ms` (5 s), over a blob store pre-filled with
 *    `--blobs` (50,000) unrelated blobs: the sweep must cost what the forgotten runs own, not the store's size;
 *  - `--rate` (20) runs/s of the `soak` workflow (bench/soak/workflows.ts: three steps and two approval waits on one
 *    signal name), open loop, through the APIs of `--orchestrators` (2) orchestrators, `--workers` (2) workers;
 *  - every request sent twice with the same Idempotency-Key (the start, and each signal: a client's retry);
 *  - midway, a rolling restart of the orchestrators from `soak` v1 to v1+v2 (new runs start on v2): while one
 *    instance has v2 and the other not, inputs of v2 runs reach an instance without their definition.
 * Prints, per minute of start time: runs started, completed, p50/p99 start-to-finish (POST accepted to RunCompleted),
 * whether a restart happened in it and its longest wait; then runs lost, inputs dropped (the orchestrators'
 * `inputs_ignored_total` for UNKNOWN_DEFINITION and UNKNOWN_RUN, scraped before each stop), steps executed twice
 * (rows of one idempotency key in PostgreSQL, written by the soak's handler) and runs that saw one approval twice.
 * Exits 1 when any of those is not 0, or (runs of 4 minutes or more) when a minute without a restart has a p99 over
 * twice the first minute's.
 *   eval "$(infra/local/stack.sh up)" && npm run soak -- --minutes 15
 */
const opts = new Command()
  .option('--minutes <n>', 'how long runs are started', '15')
  .option('--rate <n>', 'runs started per second (open loop)', '20')
  .option('--blobs <n>', 'unrelated blobs pre-filled into the blob store', '50000')
  .option('--orchestrators <n>', 'orchestrator instances', '2')
  .option('--workers <n>', 'worker processes', '2')
  .option('--retention-ms <n>', 'ORCHESTRATOR_RUN_RETENTION_MS', '30000')
  .option('--sweep-ms <n>', 'ORCHESTRATOR_RETENTION_SWEEP_MS', '5000')
  .option('--drain-seconds <n>', 'how long runs may take to finish once the load stops', '180')
  .parse()
  .opts<{
    minutes: string;
    rate: string;
    blobs: string;
    orchestrators: string;
    workers: string;
    retentionMs: string;
    sweepMs: string;
    drainSeconds: string;
  }>();

const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
const registryUrl = process.env.SCHEMA_REGISTRY_URL ?? '';
const postgresUrl = process.env.POSTGRES_URL ?? '';
if (!brokers.length || !registryUrl || !process.env.REDIS_URL || !postgresUrl)
  throw new Error(
    'KAFKA_BROKERS, SCHEMA_REGISTRY_URL, REDIS_URL and POSTGRES_URL must be set: eval "$(infra/local/stack.sh up)"',
  );

type Service = ReturnType<typeof spawnService>;
interface Instance {
  index: number;
  service: Service;
  url: string;
  http: Pool;
  versions: string;
  /** Set before it is stopped: no request goes to it any more. */
  down?: boolean;
}
interface Run {
  startedAt: number;
  signalled: Set<number>;
}
/** What wf.events said of a run (read before or after its start was answered). */
interface Progress {
  first?: boolean;
  approve1?: boolean;
  completedAt?: number;
  ended?: string;
}

const IGNORED = /inputs_ignored_total\{[^}]*reason="([A-Z_]+)"[^}]*\} (\d+(?:\.\d+)?)/g;

async function main() {
  const minutes = Number(opts.minutes);
  const rate = Number(opts.rate);
  const stamp = Date.now();
  const prefix = `soak-${stamp}.`;
  const table = `soak_${stamp}_exec`;
  const dir = join(ROOT, '.keyflow', `soak-${stamp}`);
  const blobDir = join(dir, 'blobs');

  // 1. The blob store, pre-filled with blobs of no run of the soak.
  const t0 = Date.now();
  await mkdir(blobDir, { recursive: true });
  const store = new FsBlobStore(blobDir);
  const blobs = Number(opts.blobs);
  for (let i = 0; i < blobs; i += 500)
    await Promise.all(
      Array.from({ length: Math.min(500, blobs - i) }, (_, j) =>
        store.put(`unrelated/${(i + j) % 997}/blob-${i + j}`, `{"n":${i + j}}`),
      ),
    );
  console.log(
    `blob store ${blobDir}: ${blobs} unrelated blobs written in ${((Date.now() - t0) / 1000).toFixed(1)} s`,
  );

  const pg = new PgPool({ connectionString: postgresUrl, max: 2 });
  await pg.query(
    `create table ${table}(idempotency_key text not null, run_id text not null, step text not null, version int not null, data jsonb, at timestamptz not null default now())`,
  );

  const env = {
    KEYFLOW_TOPIC_PREFIX: prefix,
    ORCHESTRATOR_GROUP_ID: `${prefix}orch`,
    WORKER_GROUP_ID: `${prefix}workers`,
    ORCHESTRATOR_PARTITIONS: '6',
    WORKER_RESULT_PARTITIONS: '6',
    KEYFLOW_BLOB_DIR: blobDir,
  };
  const orchEnv = (versions: string) => ({
    ...env,
    SOAK_VERSIONS: versions,
    ORCHESTRATOR_RUN_RETENTION_MS: opts.retentionMs,
    ORCHESTRATOR_RETENTION_SWEEP_MS: opts.sweepMs,
  });
  const ignored = new Map<string, number>();
  const scrapeIgnored = async (o: Instance) => {
    const text = await (await fetch(`${o.url}/metrics`)).text().catch(() => '');
    for (const [, reason, n] of text.matchAll(IGNORED))
      ignored.set(reason, (ignored.get(reason) ?? 0) + Number(n));
  };
  const startOrchestrator = async (index: number, versions: string): Promise<Instance> => {
    const service = spawnService('bench/soak/orchestrator.ts', orchEnv(versions), 'orchestrator ready');
    const url = await service.ready;
    return { index, service, url, http: new Pool(url, { connections: 32 }), versions };
  };
  const orchestrators: Instance[] = [];
  for (let i = 0; i < Number(opts.orchestrators); i++) orchestrators.push(await startOrchestrator(i, '1'));
  const workers = Array.from({ length: Number(opts.workers) }, () =>
    spawnService(
      'bench/soak/worker.ts',
      { ...env, WORKER_TASK_TYPES: soakStep.type, SOAK_TABLE: table },
      'worker ready',
    ),
  );
  await Promise.all(workers.map((w) => w.ready));
  const live = () => orchestrators.filter((o) => !o.down && !o.service.exited());

  // 2. Lifecycle events: the signals follow the run's progress; RunCompleted ends it.
  const runs = new Map<string, Run>();
  const requestErrors = new Map<string, number>();
  const countError = (what: string) => requestErrors.set(what, (requestErrors.get(what) ?? 0) + 1);
  let next = 0;
  /** POSTs `body` to `path` twice with the same Idempotency-Key (a client's retry); a 404/503/5xx is tried again. */
  const twice = async (path: string, body: unknown, key: string): Promise<unknown> => {
    let first: unknown;
    for (let copy = 0; copy < 2; copy++)
      for (let attempt = 0; ; attempt++) {
        const targets = live();
        const o = targets[next++ % targets.length];
        try {
          const res = await o.http.request({
            path,
            method: 'POST',
            headers: { 'content-type': 'application/json', 'idempotency-key': key },
            body: JSON.stringify(body),
          });
          const text = await res.body.text();
          if (res.statusCode === 202 || res.statusCode === 200) {
            first ??= JSON.parse(text);
            break;
          }
          // A read model that has not seen the run yet (404), an instance stopping (503): a client tries again.
          if (attempt < 50 && [404, 409, 503, 500, 502].includes(res.statusCode)) {
            await new Promise((r) => setTimeout(r, 100));
            continue;
          }
          countError(`${path.split('/').at(-1)} HTTP ${res.statusCode}: ${text.slice(0, 120)}`);
          return first;
        } catch (e) {
          if (attempt < 50) {
            await new Promise((r) => setTimeout(r, 100));
            continue;
          }
          countError(`${path.split('/').at(-1)}: ${(e as Error).message}`);
          return first;
        }
      }
    return first;
  };
  const progress = new Map<string, Progress>();
  const progressOf = (runId: string) => {
    let p = progress.get(runId);
    if (!p) progress.set(runId, (p = {}));
    return p;
  };
  /** Sends the signal a registered run's progress calls for (each once, twice over HTTP). */
  const advance = (runId: string) => {
    const run = runs.get(runId);
    const p = progress.get(runId);
    if (!run || !p) return;
    const n = p.approve1 ? 2 : p.first ? 1 : 0;
    for (let k = 1; k <= n; k++) {
      if (run.signalled.has(k)) continue;
      run.signalled.add(k);
      void twice(
        `/runs/${encodeURIComponent(runId)}/signal`,
        { signal: SOAK_SIGNAL, payload: { n: k } },
        `${runId}/approval-${k}`,
      );
    }
  };
  const codec = new EventCodec({ registryUrl, topicPrefix: prefix });
  await codec.registerTopics([Topic.WF_EVENTS]);
  const kafka = new Kafka({ brokers, clientId: 'soak', logLevel: logLevel.NOTHING });
  const consumer = await readLifecycle(kafka, codec, `${prefix}events`, (d) => {
    const v = d.value as { runId: string; stepId?: string; metadata: { occurredAt: number } };
    const p = progressOf(v.runId);
    if (d.event === 'StepCompleted' && v.stepId === 'first') p.first = true;
    else if (d.event === 'StepCompleted' && v.stepId === 'approve1') p.approve1 = true;
    else if (d.event === 'RunCompleted') p.completedAt ??= v.metadata.occurredAt;
    else if (d.event === 'RunFailed' || d.event === 'RunCancelled' || d.event === 'RunCompensated')
      p.ended ??= d.event;
    advance(v.runId);
  });

  // 3. The load, open loop; the rolling restart midway.
  const loadStart = Date.now();
  const restartAt = loadStart + (minutes * 60_000) / 2;
  const restarts: Array<{ at: number; ms: number; index: number }> = [];
  const rolling = (async () => {
    await new Promise((r) => setTimeout(r, Math.max(0, restartAt - Date.now())));
    for (let i = 0; i < orchestrators.length; i++) {
      const at = Date.now();
      const old = orchestrators[i];
      old.down = true;
      await scrapeIgnored(old);
      await old.service.stop();
      await old.http.close();
      orchestrators[i] = await startOrchestrator(i, '1,2');
      restarts.push({ at, ms: Date.now() - at, index: i });
      console.log(`restart of orchestrator ${i} (v1 -> v1,v2): ${Date.now() - at} ms until ready`);
    }
  })();
  const total = Math.round(minutes * 60 * rate);
  const starting: Array<Promise<unknown>> = [];
  for (let i = 0; i < total; i++) {
    const wait = loadStart + (i * 1000) / rate - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    for (const s of [...orchestrators.map((o) => o.service), ...workers]) {
      const gone = s.exited();
      if (gone) throw new Error(`soak stopped: ${gone}`);
    }
    const t = Date.now();
    starting.push(
      twice('/runs', { workflow: 'soak', input: { i } }, `soak-${stamp}-${i}`).then((a) => {
        const runId = (a as { runId?: string } | undefined)?.runId;
        if (!runId) return;
        if (!runs.has(runId)) runs.set(runId, { startedAt: t, signalled: new Set() });
        advance(runId);
      }),
    );
  }
  await Promise.all(starting);
  await rolling;
  const done = (runId: string) => {
    const p = progress.get(runId);
    return p?.completedAt !== undefined || p?.ended !== undefined;
  };
  const drainUntil = Date.now() + Number(opts.drainSeconds) * 1000;
  while (Date.now() < drainUntil && [...runs.keys()].some((id) => !done(id))) {
    await new Promise((r) => setTimeout(r, 250));
  }
  for (const o of live()) await scrapeIgnored(o);

  // 4. The figures.
  const rows = await pg.query<{ dup: string; wrong: string }>(
    `select (select count(*) from (select idempotency_key from ${table} group by 1 having count(*) > 1) d) as dup,
            (select count(*) from ${table} where step = 'second' and data <> '[{"n":1},{"n":2}]'::jsonb) as wrong`,
  );
  const twiceExecuted = Number(rows.rows[0].dup);
  const wrongApprovals = Number(rows.rows[0].wrong);
  const byMinute = new Map<number, Array<{ startedAt: number; completedAt?: number }>>();
  for (const [id, r] of runs) {
    const m = Math.floor((r.startedAt - loadStart) / 60_000);
    byMinute.set(m, [
      ...(byMinute.get(m) ?? []),
      { startedAt: r.startedAt, completedAt: progress.get(id)?.completedAt },
    ]);
  }
  console.log(
    `\nsoak: ${minutes} min at ${rate} runs/s, ${orchestrators.length} orchestrators, ${workers.length} workers, retention ${opts.retentionMs} ms, sweep ${opts.sweepMs} ms, ${blobs} unrelated blobs`,
  );
  console.log('minute  started  completed  p50 ms  p99 ms  max ms  restart');
  let firstP99 = NaN;
  let degraded = 0;
  for (const [m, list] of [...byMinute].sort((a, b) => a[0] - b[0])) {
    const lat = list.filter((r) => r.completedAt !== undefined).map((r) => r.completedAt! - r.startedAt);
    const from = loadStart + m * 60_000;
    const restarted = restarts.some((x) => x.at < from + 60_000 && x.at + x.ms >= from);
    const p99 = pct(lat, 99);
    if (m === 0) firstP99 = p99;
    const over = !restarted && m > 0 && p99 > 2 * firstP99;
    if (over) degraded++;
    console.log(
      `${String(m + 1).padStart(6)}  ${String(list.length).padStart(7)}  ${String(lat.length).padStart(9)}  ${String(pct(lat, 50)).padStart(6)}  ${String(p99).padStart(6)}  ${String(Math.max(...lat)).padStart(6)}  ${restarted ? 'yes' : ''}${over ? '  p99 over 2x minute 1' : ''}`,
    );
  }
  const lost = [...runs.keys()].filter((id) => progress.get(id)?.completedAt === undefined).length;
  const ended = [...runs.keys()].filter((id) => progress.get(id)?.ended).length;
  const dropped = (ignored.get('UNKNOWN_DEFINITION') ?? 0) + (ignored.get('UNKNOWN_RUN') ?? 0);
  console.log(
    `runs started: ${runs.size} of ${total} requested; runs lost (not completed): ${lost} (${ended} ended otherwise)`,
  );
  console.log(
    `inputs dropped: ${dropped} (inputs_ignored_total: ${[...ignored].map(([k, v]) => `${k} ${v}`).join(', ') || 'none'})`,
  );
  console.log(`steps executed twice: ${twiceExecuted}; runs that took one approval twice: ${wrongApprovals}`);
  if (requestErrors.size)
    console.log(`requests refused for good: ${[...requestErrors].map(([k, v]) => `${v}x ${k}`).join('; ')}`);
  for (const r of restarts)
    console.log(
      `restart of orchestrator ${r.index} at minute ${Math.floor((r.at - loadStart) / 60_000) + 1}: ready after ${r.ms} ms`,
    );
  const timeCheck = minutes >= 4 ? degraded === 0 : true;
  console.log(
    `p99 of minutes without a restart within 2x minute 1's (${firstP99} ms): ${minutes >= 4 ? (degraded === 0 ? 'yes' : `no (${degraded} minutes over)`) : 'not judged under 4 minutes'}`,
  );

  await consumer.disconnect();
  await Promise.all([...orchestrators.map((o) => o.service.stop()), ...workers.map((w) => w.stop())]);
  await Promise.all(orchestrators.map((o) => o.http.close()));
  // The soak's topics (every one under its prefix) go with it: a long-lived local broker would keep them all.
  const admin = kafka.admin();
  await admin.connect();
  const topics = (await admin.listTopics()).filter((t) => t.startsWith(prefix));
  await admin.deleteTopics({ topics }).catch((e) => console.warn(`could not delete the soak's topics: ${e}`));
  await admin.disconnect();
  await pg.query(`drop table ${table}`);
  await pg.end();
  await rm(dir, { recursive: true, force: true });
  const ok = lost === 0 && dropped === 0 && twiceExecuted === 0 && wrongApprovals === 0 && timeCheck;
  console.log(`soak: ${ok ? 'passed' : 'FAILED'}`);
  return ok;
}

// Whichever way it ends, the services it spawned and left running are stopped first (see stopSpawned).
main().then(
  (ok) => void stopSpawned().then(() => process.exit(ok ? 0 : 1)),
  (e) => {
    console.error(e);
    void stopSpawned().then(() => process.exit(1));
  },
);
