import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

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
