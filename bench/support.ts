import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Pool } from 'undici';

export const ROOT = join(__dirname, '..');

/** Percentile `p` (0-100) of `xs` (nearest rank). */
export const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

/** Waits until `cond()` holds, polling every 20 ms; throws after `timeoutMs`. */
export async function until(cond: () => boolean, timeoutMs: number, what = 'condition') {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`benchmark timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Peak resident set size of a process in MiB (VmHWM), NaN when it is gone. */
export function peakRssMb(pid: number | undefined): number {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

/** CPU time (user + system) a process has used so far in seconds, from /proc/<pid>/stat; NaN when it is gone. */
export function cpuSeconds(pid: number | undefined): number {
  try {
    // Fields after the command name (which may hold spaces, so split after its closing parenthesis): utime is the
    // 14th field of the line, stime the 15th, in clock ticks (USER_HZ, 100 on Linux: proc(5)).
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

/** The local stack's processes (`infra/local/stack.sh`: broker(s), registry, Redis) by name, from its pid files. */
export function stackPids(): Record<string, number> {
  const dir = process.env.KEYFLOW_RUN_DIR ?? join(ROOT, 'infra/local/.run');
  const out: Record<string, number> = {};
  try {
    for (const f of readdirSync(dir))
      if (f.endsWith('.pid')) out[f.slice(0, -4)] = Number(readFileSync(join(dir, f), 'utf8').trim());
  } catch {
    /* no local stack (testcontainers or a remote cluster): nothing to list */
  }
  return out;
}

/**
 * Starts measuring the CPU used by each named process (this one is `bench`); the returned function prints the
 * split since then as `name N% ...` (percent of one core over the wall time; 200 % is both cores of this machine).
 */
export function cpuSplit(pids: Record<string, number | undefined>): () => string {
  const named = { bench: process.pid, ...stackPids(), ...pids };
  const t0 = Date.now();
  const before = Object.fromEntries(Object.entries(named).map(([n, p]) => [n, cpuSeconds(p)]));
  return () => {
    const wall = (Date.now() - t0) / 1000;
    return Object.entries(named)
      .map(([n, p]) => [n, ((cpuSeconds(p) - before[n]) / wall) * 100] as const)
      .filter(([, v]) => Number.isFinite(v))
      .map(([n, v]) => `${n} ${v.toFixed(0)}%`)
      .join(', ');
  };
}

/**
 * An HTTP/1.1 client for `origin` (undici's Pool: up to `connections` keep-alive connections, no pipelining), far
 * cheaper per request than the global `fetch`, so the bench's own client takes less of the machine's two cores.
 * `post` sends a JSON body and resolves with the status and the parsed JSON answer (undefined when empty).
 */
export function httpClient(origin: string, connections = 64) {
  const pool = new Pool(origin, { connections });
  return {
    async post(path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
      const res = await pool.request({
        path,
        method: 'POST',
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.body.text();
      return { status: res.statusCode, json: text ? JSON.parse(text) : undefined };
    },
    close: () => pool.close(),
  };
}

/**
 * An OTLP/HTTP endpoint that accepts every export and keeps only a count of requests and bytes (a collector that
 * costs nothing), for benchmarks with tracing on.
 */
export async function otlpSink(): Promise<{
  url: string;
  stats: { requests: number; bytes: number };
  close: () => void;
}> {
  const { createServer } = await import('node:http');
  const stats = { requests: 0, bytes: 0 };
  const server = createServer((req, res) => {
    req.on('data', (c: Buffer) => (stats.bytes += c.length));
    req.on('end', () => {
      stats.requests++;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, stats, close: () => server.close() };
}

/** Spawns a service entry point; `ready` resolves with its HTTP URL when it logs `readyMsg`. */
/** `nodeArgs`: extra Node options before the entry (e.g. `--cpu-prof`, which NODE_OPTIONS does not accept). */
export function spawnService(
  entry: string,
  env: Record<string, string>,
  readyMsg: string,
  nodeArgs: string[] = [],
) {
  const proc: ChildProcess = spawn(
    process.execPath,
    [...nodeArgs, '-r', '@swc-node/register', join(ROOT, entry)],
    {
      cwd: ROOT,
      env: { ...process.env, LOG_LEVEL: 'info', ...env },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const ready = new Promise<string>((resolve, reject) => {
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      if (line.includes(`"${readyMsg}"`)) resolve(JSON.parse(line).http);
    });
    proc.once('exit', (code) => reject(new Error(`${entry} exited with ${code}`)));
  });
  ready.catch(() => undefined); // callers that never await readiness must not crash when the process stops
  return {
    proc,
    ready,
    peakRssMb: () => peakRssMb(proc.pid),
    stop: () => new Promise<void>((r) => (proc.once('exit', () => r()), proc.kill('SIGTERM'))),
  };
}
