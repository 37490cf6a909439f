import { execFile, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { startServiceProcess } from '@keyflow/testing';
import type { etlReport } from '@keyflow/example-geonames-etl';
import type { TaskOutputOf } from '@keyflow/workflow';

export const ROOT = join(__dirname, '../../..');
const run = promisify(execFile);

export interface EtlOutput {
  runId: string;
  seconds: number;
  /** The report step's output, as its task contract defines it. */
  report: TaskOutputOf<typeof etlReport>;
}

/** Runs the main job's command (examples/geonames-etl/src/main.ts, what `npm start` runs) and parses its JSON output. */
export async function runEtl(args: string[]): Promise<EtlOutput> {
  const { stdout } = await run(
    process.execPath,
    ['-r', '@swc-node/register', join(ROOT, 'examples/geonames-etl/src/main.ts'), ...args],
    {
      cwd: ROOT,
      env: process.env,
      maxBuffer: 64 * 1024 * 1024,
      timeout: 600_000,
    },
  );
  return JSON.parse(stdout) as EtlOutput;
}

/** A service process (orchestrator or worker main, a path from the repository's root) with its ready URL. */
export function startService(
  entry: string,
  env: Record<string, string>,
  readyMsg: string,
): { proc: ChildProcess; ready: Promise<string>; exited: Promise<unknown> } {
  return startServiceProcess(join(ROOT, entry), env, readyMsg, { cwd: ROOT });
}

export async function runFeeder(
  args: string[],
): Promise<{ eventsRead: number; distinctKeys: number; indexFile: string }> {
  const { stdout } = await run(
    process.execPath,
    ['-r', '@swc-node/register', join(ROOT, 'examples/geonames-etl/src/search-index-feeder.ts'), ...args],
    { cwd: ROOT, env: process.env, timeout: 300_000 },
  );
  return JSON.parse(stdout.trim().split('\n').at(-1)!);
}
