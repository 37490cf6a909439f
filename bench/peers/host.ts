import { fork, type ChildProcess } from 'node:child_process';

/**
 * The engine side's Node processes of the peers (a BullMQ worker, the DBOS app, the Restate SDK service): the engine
 * file forks itself with PEER_ROLE set, and asks the child over IPC for its step executions at the end.
 */

/** Times each step function ran, `<run id>:<step>` -> count, kept by the process that runs the steps. */
export const executions = new Map<string, number>();

/** Counts one execution of step `k` of run `runId`. */
export const countStep = (runId: string, k: number) =>
  executions.set(`${runId}:${k}`, (executions.get(`${runId}:${k}`) ?? 0) + 1);

/**
 * In a forked child: answers `counts` with its {@link executions}, exits on `stop` after `stop()`; posts `ready`
 * (with `info`) once `start` resolves.
 */
export function serveRole(start: () => Promise<unknown>, stop: () => Promise<void>): void {
  // The bench gone (killed, crashed): its IPC channel closes, and this process goes too.
  process.on('disconnect', () => process.exit(0));
  process.on('message', (m: unknown) => {
    if (m === 'counts') process.send!({ counts: [...executions] });
    if (m === 'stop') void stop().finally(() => process.exit(0));
  });
  start().then(
    (info) => process.send!({ ready: info ?? true }),
    (e: unknown) => {
      console.error(e);
      process.exit(1);
    },
  );
}

/** A forked role process of `file` (this same engine file) with `env`; `ready` resolves with what it posted. */
export function forkRole(file: string, env: Record<string, string>) {
  const proc: ChildProcess = fork(file, [], {
    execArgv: ['-r', '@swc-node/register'],
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const ready = new Promise<unknown>((resolve, reject) => {
    proc.on('message', (m: { ready?: unknown }) => m.ready !== undefined && resolve(m.ready));
    proc.once('exit', (c) => reject(new Error(`${env.PEER_ROLE} process exited (code ${c})`)));
  });
  return {
    proc,
    ready,
    counts: () =>
      new Promise<Array<[string, number]>>((resolve) => {
        const on = (m: { counts?: Array<[string, number]> }) => {
          if (!m.counts) return;
          proc.off('message', on);
          resolve(m.counts);
        };
        proc.on('message', on);
        proc.send('counts');
      }),
    stop: () =>
      new Promise<void>((r) => {
        if (proc.exitCode !== null) return r();
        proc.once('exit', () => r());
        proc.send('stop');
      }),
  };
}

/** The executions of all `hosts`, merged. */
export async function mergedCounts(hosts: Array<ReturnType<typeof forkRole>>) {
  const all = new Map<string, number>();
  for (const h of hosts) for (const [k, n] of await h.counts()) all.set(k, (all.get(k) ?? 0) + n);
  return all;
}
