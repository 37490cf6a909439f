import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';

export const ROOT = join(__dirname, '../../..');
const run = promisify(execFile);

export interface EtlOutput {
  runId: string;
  seconds: number;
  report: {
    read: number;
    extracted: number;
    rejected: number;
    rejectsByReason: Record<string, number>;
    duplicates: number;
    accepted: number;
    loaded: number;
    byCountry: Record<string, number>;
    byRegion: Record<string, number>;
    sink: { rows: number; checksum: string; path?: string; table: string };
    sinkMatches: boolean;
    balanced: boolean;
  };
}

/** Runs the main job's command (apps/etl-cli/src/main.ts, what `npm start` runs) and parses its JSON output. */
export async function runEtl(args: string[]): Promise<EtlOutput> {
  const { stdout } = await run(
    process.execPath,
    ['-r', '@swc-node/register', join(ROOT, 'apps/etl-cli/src/main.ts'), ...args],
    {
      cwd: ROOT,
      env: process.env,
      maxBuffer: 64 * 1024 * 1024,
      timeout: 600_000,
    },
  );
  return JSON.parse(stdout) as EtlOutput;
}

/** A service process (orchestrator or worker main) with its ready URL. */
export function startService(
  entry: string,
  env: Record<string, string>,
  readyMsg: string,
): { proc: ChildProcess; ready: Promise<string>; exited: Promise<unknown> } {
  const proc = spawn(process.execPath, ['-r', '@swc-node/register', join(ROOT, entry)], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const tail: string[] = [];
  const keep = (l: string) => {
    tail.push(l);
    if (tail.length > 40) tail.shift();
  };
  createInterface({ input: proc.stderr! }).on('line', keep);
  const exited = new Promise((r) => proc.once('exit', r));
  const ready = new Promise<string>((resolve, reject) => {
    createInterface({ input: proc.stdout! }).on('line', (l) => {
      keep(l);
      if (l.includes(`"${readyMsg}"`)) resolve(JSON.parse(l).http);
    });
    void exited.then((code) => reject(new Error(`${entry} exited with ${code}:\n${tail.join('\n')}`)));
  });
  return { proc, ready, exited };
}

export async function runFeeder(
  args: string[],
): Promise<{ eventsRead: number; distinctKeys: number; indexFile: string }> {
  const { stdout } = await run(
    process.execPath,
    ['-r', '@swc-node/register', join(ROOT, 'examples/search-index-feeder.ts'), ...args],
    { cwd: ROOT, env: process.env, timeout: 300_000 },
  );
  return JSON.parse(stdout.trim().split('\n').at(-1)!);
}
