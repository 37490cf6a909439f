import { execFileSync, spawn } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { workload, type EngineResult } from './common';

/**
 * `npm run bench:peers`: runs the same workload through keyflow and each peer, one after another, each in its own
 * process (bench/peers/<engine>.ts), and prints one markdown table; writes every figure to bench/out/peers.json and
 * each engine's output to bench/out/peers-<engine>.log. An engine whose packages are missing, or that fails, gets its
 * row with the reason; the others still run. `--only keyflow,bullmq` runs some of them.
 */
const ENGINES: Array<{ file: string; name: string; needs: string[] }> = [
  { file: 'keyflow', name: 'keyflow', needs: [] },
  { file: 'dbos', name: 'DBOS Transact', needs: ['@dbos-inc/dbos-sdk', 'pg'] },
  {
    file: 'restate',
    name: 'Restate',
    needs: [
      '@restatedev/restate-sdk',
      '@restatedev/restate-sdk-clients',
      `@restatedev/restate-server-${process.platform}-${process.arch}`,
    ],
  },
  { file: 'bullmq', name: 'BullMQ', needs: ['bullmq', 'ioredis'] },
];

const only = process.argv.includes('--only')
  ? process.argv[process.argv.indexOf('--only') + 1].split(',')
  : undefined;
const OUT = join(__dirname, '../out');

/** The machine before the run: load averages and the processes using the most CPU right now. */
function idleCheck(): { loadAvg: number[]; busiest: string } {
  const busiest = execFileSync('ps', ['-eo', 'pcpu,etime,comm', '--sort=-pcpu'], { encoding: 'utf8' })
    .split('\n')
    .slice(1, 9)
    .map((l) => l.trim())
    .filter(Boolean)
    .join('; ');
  return { loadAvg: loadavg(), busiest };
}

function runOne(file: string, name: string): Promise<EngineResult> {
  const log = createWriteStream(join(OUT, `peers-${file}.log`));
  const proc = spawn(process.execPath, ['-r', '@swc-node/register', join(__dirname, `${file}.ts`)], {
    cwd: join(__dirname, '../..'),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  proc.stderr.pipe(log, { end: false });
  let result: EngineResult | undefined;
  createInterface({ input: proc.stdout }).on('line', (l) => {
    if (l.startsWith('PEER_RESULT ')) result = JSON.parse(l.slice('PEER_RESULT '.length)) as EngineResult;
    else log.write(`${l}\n`);
  });
  return new Promise((resolve) =>
    proc.once('close', (code) => {
      log.end();
      resolve(
        result ?? {
          engine: name,
          version: '',
          layout: '',
          durability: '',
          error: `exited with code ${code}, no result`,
        },
      );
    }),
  );
}

const f0 = (n: number | null | undefined) => (n === null || n === undefined ? '-' : n.toFixed(1));

function table(rows: EngineResult[]): string {
  const head = [
    'engine',
    `runs/s, burst of ${workload.burst}`,
    `p50 / p95 / p99 ms at ${workload.rate} runs/s offered for ${workload.seconds} s`,
    'CPU s: engine / workers / store / client',
    'durability',
    'verified',
  ];
  const lines = rows.map((r) =>
    r.error
      ? [r.engine, '-', '-', '-', r.durability || '-', `did not run: ${r.error}`]
      : [
          `${r.engine} (${r.version})`,
          r.burst!.runsPerSec.toFixed(0),
          `${r.load!.p50} / ${r.load!.p95} / ${r.load!.p99}`,
          `${f0(r.cpu!.engine)} / ${f0(r.cpu!.workers)} / ${f0(r.cpu!.store)} / ${f0(r.cpu!.client)}`,
          r.durability,
          r.verified ?? '',
        ],
  );
  return [head, head.map(() => '---'), ...lines].map((l) => `| ${l.join(' | ')} |`).join('\n');
}

async function main() {
  mkdirSync(OUT, { recursive: true });
  const idle = idleCheck();
  console.log(
    `idle check before the run: load average ${idle.loadAvg.map((x) => x.toFixed(2)).join(' ')} (1/5/15 min) on ${cpus().length} cores; busiest processes (%CPU, elapsed, name): ${idle.busiest}`,
  );
  const rows: EngineResult[] = [];
  for (const e of ENGINES.filter((x) => !only || only.includes(x.file))) {
    const missing = e.needs.filter((p) => !existsSync(join(__dirname, 'node_modules', p, 'package.json')));
    const row = missing.length
      ? {
          engine: e.name,
          version: '',
          layout: '',
          durability: '',
          error: `not installed here: ${missing.join(', ')} (bench/peers/install.log)`,
        }
      : await runOne(e.file, e.name);
    console.log(
      `${row.engine}: ${row.error ? `did not run: ${row.error}` : `${row.layout}; load average before ${row.loadAvgBefore?.map((x) => x.toFixed(2)).join(' ')}; ${row.verified}`}`,
    );
    rows.push(row);
  }
  console.log(`\n${table(rows)}\n`);
  for (const r of rows.filter((x) => x.note)) console.log(`${r.engine}: ${r.note}`);
  const file = join(OUT, 'peers.json');
  writeFileSync(file, JSON.stringify({ at: new Date().toISOString(), workload, idle, rows }, null, 2));
  console.log(`figures: ${file}; each engine's output: ${OUT}/peers-<engine>.log`);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
