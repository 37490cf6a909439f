import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

/** A Node.js service started from its entry (TypeScript, or compiled JavaScript), as a test runs it. */
export interface ServiceProcess {
  proc: ChildProcess;
  /** The `http` field of the service's ready log line (JSON, `msg` = readyMsg); rejects if it exits first. */
  ready: Promise<string>;
  /** Resolves with the exit code once the process has exited. */
  exited: Promise<number | null>;
  /** The last 40 lines of its stdout and stderr (for failure messages). */
  tail(): string;
}

/**
 * Starts `node -r @swc-node/register <entry>` (`node <entry>` for a `.js` entry) with `env` over the test's own environment (LOG_LEVEL info), and
 * watches its stdout for the ready line `"<readyMsg>"` (pino JSON). `onLine` sees every line of its stdout and
 * stderr (its logs, a consumer's output). Pass `readyMsg: null` for a process without a ready line (`ready` then resolves at once with '').
 */
export function startServiceProcess(
  entry: string,
  env: Record<string, string>,
  readyMsg: string | null,
  o: { cwd?: string; onLine?: (line: string) => void } = {},
): ServiceProcess {
  // A compiled entry (.js) runs as it is; TypeScript through swc.
  const args = entry.endsWith('.js') ? [entry] : ['-r', '@swc-node/register', entry];
  const proc = spawn(process.execPath, args, {
    cwd: o.cwd,
    env: { ...process.env, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const keep = (l: string) => {
    lines.push(l);
    if (lines.length > 40) lines.shift();
  };
  createInterface({ input: proc.stderr! }).on('line', (l) => {
    keep(l);
    o.onLine?.(l);
  });
  const exited = new Promise<number | null>((r) => proc.once('exit', r));
  const ready = new Promise<string>((resolve, reject) => {
    if (readyMsg === null) resolve('');
    createInterface({ input: proc.stdout! }).on('line', (l) => {
      keep(l);
      o.onLine?.(l);
      if (readyMsg !== null && l.includes(`"${readyMsg}"`)) resolve(JSON.parse(l).http);
    });
    void exited.then((code) => reject(new Error(`${entry} exited with ${code}:\n${lines.join('\n')}`)));
  });
  ready.catch(() => undefined); // a caller that never awaits it does not get an unhandled rejection
  return { proc, ready, exited, tail: () => lines.join('\n') };
}
