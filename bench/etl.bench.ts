import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Command } from 'commander';
import { Kafka, logLevel } from 'kafkajs';
import { ROOT, benchWait, benchTopics, runBench } from './support';
import { eventually } from '@keyflow/testing';

/**
 * The main job's benchmark, printed as the BENCHMARKS.md table: records/s of the whole GeoNames ETL (171,075 records)
 * with 1 and 2 workers, peak memory of every process, and, in the same run, the raw kafkajs produce-consume rate
 * over the same number of ~300-byte messages (one topic, 6 partitions, acks=all) for comparison, and the CPU seconds
 * every process used during each run (the orchestrator, each worker, the CLI, the broker, the registry, Redis).
 *   eval "$(infra/local/stack.sh up)" && npm run bench:etl -- --workers 1,2
 *   npm run etl:generate -- --records 1000000 --out .keyflow/cities-1m.jsonl
 *   npm run bench:etl -- --workers 1,2 --input .keyflow/cities-1m.jsonl
 */
const opts = new Command()
  .option('--workers <list>', 'worker counts to measure', '1,2')
  .option('--input <path>', 'input file (default: the 171,075 GeoNames cities)')
  .option('--profile <dir>', 'each service writes a V8 CPU profile (<name>.cpuprofile) into <dir>/w<workers>')
  .parse()
  .opts<{ workers: string; input?: string; profile?: string }>();
const run = promisify(execFile);

async function rawKafka(n: number): Promise<{ produce: number; consume: number }> {
  const kafka = new Kafka({
    brokers: (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(','),
    clientId: 'bench',
    logLevel: logLevel.NOTHING,
  });
  const topic = benchTopics(`bench-raw-${Date.now()}`);
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 6 }], waitForLeaders: true });
  await admin.disconnect();
  const value = Buffer.alloc(300, 'x');
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const t0 = Date.now();
  for (let i = 0; i < n; i += 1000) {
    await producer.send({
      topic,
      acks: -1,
      messages: Array.from({ length: Math.min(1000, n - i) }, (_, j) => ({ key: `k${i + j}`, value })),
    });
  }
  const produce = n / ((Date.now() - t0) / 1000);
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `${topic}-g` });
  let seen = 0;
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const t1 = Date.now();
  await consumer.run({ eachBatch: async ({ batch }) => void (seen += batch.messages.length) });
  await eventually('raw consume', () => seen >= n, benchWait(300_000, 'raw consume'));
  const consume = n / ((Date.now() - t1) / 1000);
  await consumer.disconnect();
  return { produce, consume };
}

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'kf-etl-bench-'));
  const rows: string[] = [];
  let records = 0;
  const rates: Array<[workers: number, recordsPerSecond: number]> = [];
  try {
    for (const w of opts.workers.split(',').map(Number)) {
      const { stdout } = await run(
        process.execPath,
        [
          '-r',
          '@swc-node/register',
          join(ROOT, 'examples/geonames-etl/src/main.ts'),
          '--workers',
          String(w),
          '--sink',
          `sqlite:${join(dir, `w${w}.sqlite`)}`,
          '--prefix',
          benchTopics(`bench-etl-${Date.now()}.`),
          ...(opts.input ? ['--input', opts.input] : []),
        ],
        {
          cwd: ROOT,
          env: {
            ...process.env,
            ...(opts.profile ? { KEYFLOW_CPU_PROF_DIR: join(opts.profile, `w${w}`) } : {}),
          },
          maxBuffer: 64 * 1024 * 1024,
        },
      );
      const out = JSON.parse(stdout) as {
        seconds: number;
        recordsPerSecond: number;
        stepMs: Record<string, number>;
        peakRssMiB: { cli: number; orchestrator: number; workers: number[] };
        cpuSeconds: Record<string, number>;
        report: { read: number; balanced: boolean };
      };
      rows.push(
        `| ${w} | ${out.report.read} | ${out.seconds.toFixed(1)} | ${out.recordsPerSecond} | ${Object.entries(
          out.stepMs,
        )
          .map(([k, v]) => `${k} ${v}`)
          .join(
            ', ',
          )} | orchestrator ${out.peakRssMiB.orchestrator}, workers ${out.peakRssMiB.workers.join(' / ')}, CLI ${out.peakRssMiB.cli} | ${Object.entries(
          out.cpuSeconds,
        )
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')} | ${out.report.balanced} |`,
      );
      records = out.report.read;
      rates.push([w, out.recordsPerSecond]);
    }
    const raw = await rawKafka(records);
    console.log(
      '| workers | records | seconds | records/s | step ms | peak RSS MiB | CPU seconds over the run | balanced |',
    );
    console.log('|---|---|---|---|---|---|---|---|');
    rows.forEach((r) => console.log(r));
    console.log(
      `\nraw kafkajs, same run, ${records} x 300-byte messages, 6 partitions, acks=all: produce ${raw.produce.toFixed(0)} msg/s, consume ${raw.consume.toFixed(0)} msg/s`,
    );
    console.log(
      `records/s over the raw produce rate: ${rates.map(([w, r]) => `${w} worker(s) ${(r / raw.produce).toFixed(2)}`).join(', ')}` +
        (rates.length > 1
          ? `; ${rates[rates.length - 1][0]} workers over ${rates[0][0]}: ${(rates[rates.length - 1][1] / rates[0][1]).toFixed(2)}x`
          : ''),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
