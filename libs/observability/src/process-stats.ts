import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * What a process has used, from Linux's /proc (proc(5)): for the benchmarks and the main job's report. Every reader
 * answers null where /proc or the process is not there (another OS, a process that has exited).
 */

/** Clock ticks per second of /proc's CPU times (USER_HZ from `getconf CLK_TCK`; 100 on Linux unless configured). */
const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;

/** CPU seconds (user + system) process `pid` has used so far: utime and stime of /proc/<pid>/stat; or null. */
export function cpuSeconds(pid: number | undefined): number | null {
  try {
    // Fields after the command name, which is in parentheses and may hold spaces: utime and stime are fields 14 and 15.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / CLOCK_TICKS;
  } catch {
    return null;
  }
}

/** Peak resident set size of process `pid` in MiB (VmHWM of /proc/<pid>/status), or null. */
export function peakRssMiB(pid: number | undefined): number | null {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : null;
  } catch {
    return null;
  }
}

/**
 * The local stack's processes (`infra/local/stack.sh`: broker(s), registry, Redis) by name, from the pid files in its
 * run directory (KEYFLOW_RUN_DIR, default `<repoRoot>/infra/local/.run`); none without a local stack.
 */
export function localStackPids(repoRoot: string): Record<string, number> {
  const dir = process.env.KEYFLOW_RUN_DIR ?? join(repoRoot, 'infra/local/.run');
  try {
    return Object.fromEntries(
      readdirSync(dir)
        .filter((f) => f.endsWith('.pid'))
        .map((f) => [f.slice(0, -'.pid'.length), Number(readFileSync(join(dir, f), 'utf8').trim())]),
    );
  } catch {
    return {};
  }
}

/**
 * Starts measuring the named processes' CPU; the returned function gives the CPU seconds each has used since (a
 * process that could not be read at either end is left out).
 */
export function cpuMeter(pids: Record<string, number | undefined>): () => Record<string, number> {
  const before = Object.fromEntries(Object.entries(pids).map(([n, p]) => [n, cpuSeconds(p)]));
  return () => {
    const used: Record<string, number> = {};
    for (const [n, p] of Object.entries(pids)) {
      const [a, b] = [before[n], cpuSeconds(p)];
      if (a !== null && b !== null) used[n] = b - a;
    }
    return used;
  };
}
