/**
 * The main job on a 3-broker cluster, quiet and with a broker killed (`npm run cluster:etl`).
 *
 *   npm run cluster:etl
 *   npm run cluster:etl -- --workers 2 --broker 1 --kill-after-ms 5000 --down-ms 10000
 *
 * Starts a 3-broker cluster with infra/local/stack.sh (KEYFLOW_BROKERS=3; run dir KEYFLOW_RUN_DIR, default
 * infra/local/.run-cluster; ports from KAFKA_PORT, KAFKA_CONTROLLER_PORT, REGISTRY_PORT, REGISTRY_MANAGEMENT_PORT,
 * KEYFLOW_REDIS_PORT as stack.sh reads them), then runs the GeoNames ETL (examples/geonames-etl/src/main.ts) twice, each into its own
 * new SQLite sink and topic prefix: once quiet, once with one broker SIGKILLed `--kill-after-ms` after the run
 * started and started again `--down-ms` later. Prints one JSON object with both reports' figures and exits non-zero
 * unless both runs are balanced, their sinks match their reports, and the two sink checksums are equal.
 * Stops the cluster afterwards when it started it (`--keep-cluster` leaves it).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { Command, InvalidArgumentError } from 'commander';
import { clusterControl } from '@keyflow/testing';

const ROOT = resolve(__dirname, '..');
const nonNegativeInt = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('a non-negative integer');
  return n;
};
const opts = new Command('cluster-etl')
  .description(
    'The GeoNames ETL on a 3-broker cluster: a quiet run, then a run with one broker killed and restarted',
  )
  .option('--workers <n>', 'worker processes per run', nonNegativeInt, 2)
  .option('--broker <i>', 'index (1-based) of the broker to kill', nonNegativeInt, 1)
  .option('--kill-after-ms <ms>', 'SIGKILL the broker this long after the run started', nonNegativeInt, 5000)
  .option('--down-ms <ms>', 'start it again this long after the kill', nonNegativeInt, 10000)
  .option('--keep-cluster', 'leave the cluster running afterwards')
  .parse()
  .opts<{ workers: number; broker: number; killAfterMs: number; downMs: number; keepCluster?: boolean }>();

const say = (m: string) => process.stderr.write(`[cluster-etl] ${m}\n`);
const env: Record<string, string> = {
  KEYFLOW_RUN_DIR: process.env.KEYFLOW_RUN_DIR ?? join(ROOT, 'infra/local/.run-cluster'),
  KEYFLOW_BROKERS: '3',
};
const cluster = clusterControl(env);
const BROKERS = 3;

interface EtlResult {
  seconds: number;
  report: {
    read: number;
    loaded: number;
    balanced: boolean;
    sinkMatches: boolean;
    sink: { checksum: string };
  };
}

/** Runs examples/geonames-etl/src/main.ts; calls `onStarted` when it prints that its run started; resolves with its JSON output. */
function etl(args: string[], onStarted: () => void): Promise<{ result?: EtlResult; code: number | null }> {
  const p = spawn(
    process.execPath,
    ['-r', '@swc-node/register', join(ROOT, 'examples/geonames-etl/src/main.ts'), ...args],
    {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  p.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  createInterface({ input: p.stderr! }).on('line', (line) => {
    if (!line.includes('█') && !line.includes('░')) process.stderr.write(`  ${line}\n`);
    if (/\[etl\] run \S+ started/.test(line)) onStarted();
  });
  return new Promise((r) =>
    p.once('exit', (code) => {
      try {
        r({ result: JSON.parse(out) as EtlResult, code });
      } catch {
        r({ code });
      }
    }),
  );
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'keyflow-cluster-etl-'));
  const wasUp = (await cluster.brokers().catch(() => [])).filter((b) => b.up).length === BROKERS;
  say(`starting a ${BROKERS}-broker cluster (run dir ${env.KEYFLOW_RUN_DIR})`);
  const exports = await cluster.up(BROKERS);
  say(`KAFKA_BROKERS=${exports.KAFKA_BROKERS}`);
  const tag = randomBytes(3).toString('hex');
  try {
    const common = ['--workers', String(opts.workers)];
    say('quiet run');
    const quiet = await etl(
      [...common, '--sink', `sqlite:${join(dir, 'quiet.sqlite')}`, '--prefix', `cluster-${tag}-quiet.`],
      () => undefined,
    );

    say(
      `run with broker ${opts.broker} SIGKILLed ${opts.killAfterMs} ms after the start, restarted ${opts.downMs} ms later`,
    );
    let startedAt = 0;
    const chaos: { killedAtMs?: number; restartAtMs?: number; backAtMs?: number; error?: string } = {};
    let chaosDone: Promise<void> = Promise.resolve();
    let ended = false;
    const killed = etl(
      [...common, '--sink', `sqlite:${join(dir, 'killed.sqlite')}`, '--prefix', `cluster-${tag}-killed.`],
      () => {
        startedAt = Date.now();
        chaosDone = (async () => {
          await new Promise((r) => setTimeout(r, opts.killAfterMs));
          if (ended) return;
          await cluster.killBroker(opts.broker);
          chaos.killedAtMs = Date.now() - startedAt;
          say(`broker ${opts.broker} SIGKILLed at +${chaos.killedAtMs} ms`);
          await new Promise((r) => setTimeout(r, opts.downMs));
          chaos.restartAtMs = Date.now() - startedAt;
          await cluster.startBroker(opts.broker);
          chaos.backAtMs = Date.now() - startedAt;
          say(`broker ${opts.broker} answering again at +${chaos.backAtMs} ms`);
        })().catch((e: Error) => void (chaos.error = e.message));
      },
    );
    const k = await killed;
    ended = true;
    const endedAtMs = Date.now() - startedAt;
    await chaosDone;

    const q = quiet.result?.report;
    const r = k.result?.report;
    const summary = {
      brokers: BROKERS,
      workers: opts.workers,
      quiet: q && {
        seconds: quiet.result!.seconds,
        read: q.read,
        loaded: q.loaded,
        balanced: q.balanced,
        sinkMatches: q.sinkMatches,
        checksum: q.sink.checksum,
      },
      killed: r && {
        seconds: k.result!.seconds,
        read: r.read,
        loaded: r.loaded,
        balanced: r.balanced,
        sinkMatches: r.sinkMatches,
        checksum: r.sink.checksum,
        broker: opts.broker,
        ...chaos,
        endedAtMs,
        restartedMidRun: chaos.backAtMs !== undefined && chaos.backAtMs < endedAtMs,
      },
      sameChecksum: !!q && !!r && q.sink.checksum === r.sink.checksum,
    };
    console.log(JSON.stringify(summary, null, 2));
    const ok =
      quiet.code === 0 &&
      k.code === 0 &&
      q?.balanced &&
      r?.balanced &&
      q?.sinkMatches &&
      r?.sinkMatches &&
      summary.sameChecksum &&
      !chaos.error;
    if (!summary.killed?.restartedMidRun) say('note: the run ended before the broker was back');
    say(ok ? 'both runs balanced, same sink checksum' : 'FAILED: see the summary above and .keyflow/logs');
    if (!ok) process.exitCode = 1;
  } finally {
    if (!opts.keepCluster && !wasUp) {
      say('stopping the cluster');
      await cluster.down().catch((e: Error) => say(e.message));
    }
  }
}

main().catch((e) => {
  say(e instanceof Error ? e.message : String(e));
  process.exit(1);
});
