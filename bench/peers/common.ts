import { readdirSync, readFileSync } from 'node:fs';
import { deepStrictEqual } from 'node:assert';
import { join } from 'node:path';
import { cpuSeconds } from '@keyflow/observability';

/**
 * What every engine of the peer comparison (issue 44) runs and how it is measured: the same three-step workflow
 * (three sequential no-op steps, step k receiving step k-1's output), a burst of runs started at once, then an open
 * loop at a fixed offered rate, every run verified.
 */

/** The input of one run. */
export type RunInput = { tag: string };

/** Step `k`'s input: the run's input for the first step, then the previous step's output (each step echoes it). */
export const stepInput = (k: 1 | 2 | 3, previous: unknown) =>
  k === 1 ? { step: 1, input: previous } : { step: k, previous };

/** The output a run of input `{ tag }` must end with: the third step's output. */
export const expectedOutput = (tag: string) => stepInput(3, stepInput(2, stepInput(1, { tag })));

/** A started run: its id in the engine, and its output once the client has seen it finish. */
export type Started = { id: string; tag: string; done: Promise<unknown> };

/** CPU seconds of each part over the measured phases (burst and open loop); null when a part has no process of its own. */
export type CpuSplit = {
  engine: number | null;
  workers: number | null;
  store: number | null;
  client: number;
};

/** One engine's row: figures, verification, CPU and the durability it ran with; `error` when it could not run. */
export interface EngineResult {
  engine: string;
  version: string;
  layout: string;
  durability: string;
  burst?: { runs: number; secs: number; runsPerSec: number };
  load?: { rate: number; seconds: number; runs: number; p50: number; p95: number; p99: number };
  cpu?: CpuSplit;
  verified?: string;
  /** Anything else the engine's row measured (printed under the table, kept in the JSON). */
  note?: string;
  loadAvgBefore?: number[];
  error?: string;
}

/** Percentile `p` (0-100) of `xs` (nearest rank). */
export const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

/**
 * The workload's size: `WARMUP` runs first (default 200, 100 at a time, each group awaited; not timed), then `BURST`
 * runs at once (default 2,000), then `RATE` runs/s (20) for `SECONDS` s (30).
 */
export const workload = {
  warmup: Number(process.env.PEERS_WARMUP ?? 200),
  burst: Number(process.env.PEERS_BURST ?? 2000),
  rate: Number(process.env.PEERS_RATE ?? 20),
  seconds: Number(process.env.PEERS_SECONDS ?? 30),
};

/** How long a run may take before the engine's row fails (`PEERS_RUN_TIMEOUT_MS`, default 300,000). */
const RUN_TIMEOUT_MS = Number(process.env.PEERS_RUN_TIMEOUT_MS ?? 300_000);

/** `s` whose `done` rejects when the run has not finished within {@link RUN_TIMEOUT_MS}: a lost run fails, never hangs. */
function bounded(s: Started): Started {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`run ${s.id} not finished after ${RUN_TIMEOUT_MS} ms`)),
      RUN_TIMEOUT_MS,
    );
    timer.unref();
  });
  return { ...s, done: Promise.race([s.done, timeout]).finally(() => clearTimeout(timer)) };
}

/** False with `PEERS_BULK=0`: {@link coalesced} sends every item alone. */
export const BULK = process.env.PEERS_BULK !== '0';

/**
 * A client's start for an engine with a bulk start: the items started in one event-loop turn go to `many` together
 * (at most `max` per call, the rest in the next), an item started alone to `one`. Each caller's promise settles with
 * its own item's answer (`many` resolves one answer per item, in order, or an Error for an item it refused).
 * `PEERS_BULK=0` sends every item alone (the engines' one-at-a-time starts, for comparison).
 */
export function coalesced<I, O>(
  one: (item: I) => Promise<O>,
  many: (items: I[]) => Promise<Array<O | Error>>,
  max: number,
): (item: I) => Promise<O> {
  const queued: Array<{ item: I; resolve: (o: O) => void; reject: (e: unknown) => void }> = [];
  const flush = async () => {
    const taken = queued.splice(0, max);
    if (queued.length) setImmediate(() => void flush());
    try {
      if (taken.length === 1 || !BULK) {
        for (const t of taken) one(t.item).then(t.resolve, t.reject);
        return;
      }
      const answers = await many(taken.map((t) => t.item));
      taken.forEach((t, i) => {
        const a = answers[i];
        if (a instanceof Error) t.reject(a);
        else t.resolve(a);
      });
    } catch (e) {
      taken.forEach((t) => t.reject(e));
    }
  };
  return (item: I) =>
    new Promise<O>((resolve, reject) => {
      queued.push({ item, resolve, reject });
      if (queued.length === 1) setImmediate(() => void flush());
    });
}

/**
 * Runs the workload through `start` (which resolves once the engine has accepted the run): the warm-up, 100 runs at a
 * time, each group awaited (every engine's code paths compiled by its runtime's JIT, its connections and caches made;
 * alternated with none, keyflow's burst showed no difference through its spread); then the burst, started 100 at a time then
 * awaited together, and the open loop, one start every 1/rate s whatever the engine does. `measure` is called when
 * the warm-up is over and its result once the loop is: the CPU of the measured phases only.
 * @returns the figures, the CPU split (`used`) and every started run, the warm-up's too (all are verified).
 */
export async function drive(startRun: (tag: string) => Promise<Started>, measure: () => () => CpuSplit) {
  const start = async (tag: string) => bounded(await startRun(tag));
  const runs: Started[] = [];
  /** Starts runs `from` .. `from + 99` (at most `total`) at once, tagged `<prefix><n>`; resolves once all are accepted. */
  const group = (prefix: string, from: number, total: number) =>
    Promise.all(Array.from({ length: Math.min(100, total - from) }, (_, j) => start(`${prefix}${from + j}`)));
  for (let i = 0; i < workload.warmup; i += 100) {
    const warm = await group('w', i, workload.warmup);
    await Promise.all(warm.map((r) => r.done));
    runs.push(...warm);
  }
  const cpu = measure();
  const t0 = Date.now();
  for (let i = 0; i < workload.burst; i += 100) runs.push(...(await group('b', i, workload.burst)));
  await Promise.all(runs.map((r) => r.done));
  const secs = (Date.now() - t0) / 1000;
  const burst = { runs: workload.burst, secs, runsPerSec: workload.burst / secs };
  const total = workload.rate * workload.seconds;
  const lat: Promise<number>[] = [];
  const tl = Date.now();
  for (let i = 0; i < total; i++) {
    const wait = tl + (i * 1000) / workload.rate - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const t = Date.now();
    lat.push(start(`l${i}`).then((s) => (runs.push(s), s.done.then(() => Date.now() - t))));
  }
  const ms = await Promise.all(lat);
  const used = cpu();
  const load = {
    rate: workload.rate,
    seconds: workload.seconds,
    runs: total,
    p50: pct(ms, 50),
    p95: pct(ms, 95),
    p99: pct(ms, 99),
  };
  return { burst, load, runs, used };
}

/**
 * Checks every run: finished once (`completions` per run id, when the engine exposes it), with the expected output,
 * and each of its three steps executed exactly once (`executions`: `<run id>:<step 1-3>` -> times its step function
 * ran). Throws naming the first fault; returns a one-line summary.
 */
export async function verify(
  runs: Started[],
  executions: Map<string, number>,
  completions?: Map<string, number>,
): Promise<string> {
  const outputs = await Promise.all(runs.map((r) => r.done));
  runs.forEach((r, i) => {
    try {
      deepStrictEqual(outputs[i], expectedOutput(r.tag));
    } catch {
      throw new Error(`run ${r.id}: wrong output ${JSON.stringify(outputs[i])}`);
    }
    for (const k of [1, 2, 3])
      if (executions.get(`${r.id}:${k}`) !== 1)
        throw new Error(`run ${r.id}: step ${k} executed ${executions.get(`${r.id}:${k}`) ?? 0} times`);
    if (completions && completions.get(r.id) !== 1)
      throw new Error(`run ${r.id}: completed ${completions.get(r.id) ?? 0} times`);
  });
  const total = [...executions.values()].reduce((a, b) => a + b, 0);
  if (total !== runs.length * 3)
    throw new Error(`${total} step executions for ${runs.length} runs (stray executions)`);
  return `${runs.length} runs completed${completions ? ' once each' : ''}, outputs right, ${total} step executions (3 per run)`;
}

/** CPU seconds a group of processes used: their own, plus (with `children`) that of their live and reaped children. */
function groupCpu(pids: number[], children = false): number {
  let s = 0;
  for (const pid of pids) {
    s += cpuSeconds(pid) ?? 0;
    if (!children) continue;
    const f = statFields(pid);
    if (f) s += (Number(f[13]) + Number(f[14])) / 100; // cutime + cstime: reaped children
    for (const c of childPids(pid)) s += cpuSeconds(c) ?? 0;
  }
  return s;
}

const statFields = (pid: number): string[] | null => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
};

/** The parent of process `pid` (0 when it is gone). */
export const parentPid = (pid: number) => Number(statFields(pid)?.[1] ?? 0);

const childPids = (pid: number) =>
  readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .map(Number)
    .filter((p) => parentPid(p) === pid);

/** The processes of each part; `store` counts its children too (PostgreSQL's backends). */
export type Parts = { engine?: number[]; workers?: number[]; store?: number[] };

/** Starts measuring CPU of `parts` and of this process (the client); the returned function gives the split. */
export function cpuParts(parts: () => Parts): () => CpuSplit {
  const p = parts();
  const read = () => ({
    engine: p.engine ? groupCpu(p.engine) : null,
    workers: p.workers ? groupCpu(p.workers) : null,
    store: p.store ? groupCpu(p.store, true) : null,
    client: cpuSeconds(process.pid) ?? 0,
  });
  const before = read();
  return () => {
    const after = read();
    const d = (k: keyof CpuSplit) =>
      after[k] === null || before[k] === null ? null : (after[k] as number) - (before[k] as number);
    return { engine: d('engine'), workers: d('workers'), store: d('store'), client: d('client') ?? 0 };
  };
}

/** A package's version as installed in bench/peers/node_modules (or the root's). */
export function versionOf(pkg: string): string {
  for (const dir of [join(__dirname, 'node_modules'), join(__dirname, '../../node_modules')])
    try {
      return (JSON.parse(readFileSync(join(dir, pkg, 'package.json'), 'utf8')) as { version: string })
        .version;
    } catch {
      // not in this one
    }
  return 'not installed';
}

/**
 * The engine file's entry: runs `bench` and prints its result as one line `PEER_RESULT <json>` for the driver (an
 * error becomes the row's `error`), then exits.
 */
export function runEngine(name: string, bench: () => Promise<EngineResult>): void {
  bench()
    .catch((e: unknown) => ({
      engine: name,
      version: '',
      layout: '',
      durability: '',
      error: e instanceof Error ? e.message : String(e),
    }))
    .then((r) => {
      console.log(`PEER_RESULT ${JSON.stringify(r)}`);
      process.exit(0);
    });
}
