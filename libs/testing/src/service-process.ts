import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

/** A Node.js service started from its entry (TypeScript, or compiled JavaScript), as a test or a bench runs it. */
export interface ServiceProcess {
  proc: ChildProcess;
  /** The `http` field of the service's ready log line (JSON, `msg` = readyMsg); rejects if it exits first. */
  ready: Promise<string>;
  /** Resolves with the exit code once the process has exited. */
  exited: Promise<number | null>;
  /**
   * Its stdout and stderr lines in arrival order, the last `keepLines` of them (default 2 000); stderr is not kept
   * when `inheritStderr` is set.
   */
  logs: string[];
  /** The last 40 lines of its stdout and stderr (for failure messages). */
  tail(): string;
  /** Sends `signal` to the process (nothing when it has already exited). */
  kill(signal: NodeJS.Signals): void;
}

/** Options of {@link startServiceProcess}. */
export interface ServiceProcessOptions {
  /** Working directory (default: this process's). */
  cwd?: string;
  /** Sees every line of its stdout and stderr (its logs, a consumer's output). */
  onLine?: (line: string) => void;
  /** Node options before the entry (e.g. `--cpu-prof`, which NODE_OPTIONS does not accept). */
  nodeArgs?: string[];
  /** Its stderr goes to this process's stderr instead of `logs` and `onLine` (benchmarks show it live). */
  inheritStderr?: boolean;
  /** How many lines `logs` keeps (default 2 000). */
  keepLines?: number;
  /** What the error of a process that exits before ready calls it (default: the entry). */
  name?: string;
}

/**
 * Starts `node -r @swc-node/register <entry>` (`node <entry>` for a `.js` entry) with `env` over this process's own
 * environment (LOG_LEVEL info unless `env` sets it), and watches its stdout for the ready line `"<readyMsg>"` (pino
 * JSON); `ready` resolves with that line's `http` field, or rejects with the exit code and the last 30 lines when the
 * process exits first. Pass `readyMsg: null` for a process without a ready line (`ready` then resolves at once with
 * ''). The one way tests, the e2e suite and the benchmarks start a service.
 */
export function startServiceProcess(
  entry: string,
  env: Record<string, string>,
  readyMsg: string | null,
  o: ServiceProcessOptions = {},
): ServiceProcess {
  // A compiled entry (.js) runs as it is; TypeScript through swc.
  const args = [
    ...(o.nodeArgs ?? []),
    ...(entry.endsWith('.js') ? [entry] : ['-r', '@swc-node/register', entry]),
  ];
  const proc = spawn(process.execPath, args, {
    cwd: o.cwd,
    env: { ...process.env, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', o.inheritStderr ? 'inherit' : 'pipe'],
  });
  const keepLines = o.keepLines ?? 2_000;
  const logs: string[] = [];
  const keep = (l: string) => {
    logs.push(l);
    if (logs.length > keepLines) logs.shift();
    o.onLine?.(l);
  };
  if (proc.stderr) createInterface({ input: proc.stderr }).on('line', keep);
  const exited = new Promise<number | null>((r) => proc.once('exit', r));
  const ready = new Promise<string>((resolve, reject) => {
    if (readyMsg === null) resolve('');
    createInterface({ input: proc.stdout! }).on('line', (l) => {
      keep(l);
      if (readyMsg !== null && l.includes(`"${readyMsg}"`)) resolve(JSON.parse(l).http);
    });
    void exited.then((code) =>
      reject(
        new Error(`${o.name ?? entry} exited with ${code} before ready:\n${logs.slice(-30).join('\n')}`),
      ),
    );
  });
  ready.catch(() => undefined); // a caller that never awaits it does not get an unhandled rejection
  return {
    proc,
    ready,
    exited,
    logs,
    tail: () => logs.slice(-40).join('\n'),
    kill: (signal) => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
    },
  };
}
