import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { Command } from 'commander';
import { Kafka, logLevel } from '@keyflow/kafka';
import { cpuSplit, httpClient, spawnService, benchTopics, runBench } from './support';

/**
 * The accept path alone (issue 44, part 3): one orchestrator of examples/test-workloads (no workers: the engine still
 * starts each accepted run and writes its first task command), then bursts of `--burst` POST /runs of the
 * `three-step` workflow started at once over `--connections` HTTP connections (as bench/peers' keyflow driver does),
 * each answered 202 once its StartRun is acknowledged by all in-sync replicas. Prints per burst: accepts/s, the
 * accept latency p50/p95/p99 (request sent -> 202 read, ms), the orchestrator's CPU ms per accept (it holds better
 * than the rate when other processes load the machine), its CPU share and the 1-minute load average.
 *   eval "$(infra/local/stack.sh env)" && npm run bench:accept -- --burst 2000 --rounds 3 [--profile /tmp/prof]
 */
const opts = new Command()
  .option('--burst <n>', 'POST /runs started at once per round', '2000')
  .option('--rounds <n>', 'bursts, one after the other (the first warms the process up)', '3')
  .option('--connections <n>', 'HTTP connections of the client', '64')
  .option('--idempotency-keys', 'each request carries its own Idempotency-Key')
  .option('--profile <dir>', 'write a V8 CPU profile (.cpuprofile) of the orchestrator into <dir>')
  .parse()
  .opts<{
    burst: string;
    rounds: string;
    connections: string;
    idempotencyKeys?: boolean;
    profile?: string;
  }>();

/** CPU time of process `pid` so far (user + system), ms (Linux: /proc/<pid>/stat fields 14 and 15, in clock ticks of 10 ms). */
const cpuMs = (pid: number): number => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
};

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

async function main() {
  const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
  if (!brokers.length) throw new Error('KAFKA_BROKERS must be set: eval "$(infra/local/stack.sh env)"');
  const prefix = benchTopics(`bench-accept-${Date.now()}.`);
  const orch = spawnService(
    'examples/test-workloads/src/orchestrator.ts',
    {
      KEYFLOW_TOPIC_PREFIX: prefix,
      ORCHESTRATOR_GROUP_ID: `${prefix}orch`,
      ORCHESTRATOR_PARTITIONS: '6',
      WORKER_RESULT_PARTITIONS: '6',
    },
    'orchestrator ready',
    opts.profile ? ['--cpu-prof', `--cpu-prof-dir=${opts.profile}`] : [],
  );
  const url = await orch.ready;
  const http = httpClient(url, Number(opts.connections));
  const burst = Number(opts.burst);
  try {
    for (let round = 1; round <= Number(opts.rounds); round++) {
      const load = loadavg()[0];
      const cpu = cpuSplit({ orchestrator: orch.proc.pid });
      const cpu0 = cpuMs(orch.proc.pid!);
      const ms: number[] = [];
      const t0 = Date.now();
      await Promise.all(
        Array.from({ length: burst }, async (_, i) => {
          const t = performance.now();
          const res = await http.post(
            '/runs',
            { workflow: 'three-step', input: { tag: `r${round}-${i}` } },
            opts.idempotencyKeys ? { 'idempotency-key': `${prefix}${round}-${i}` } : undefined,
          );
          if (res.status !== 202)
            throw new Error(`start failed: HTTP ${res.status} ${JSON.stringify(res.json)}`);
          ms.push(performance.now() - t);
        }),
      );
      const secs = (Date.now() - t0) / 1000;
      const perAccept = (cpuMs(orch.proc.pid!) - cpu0) / burst;
      console.log(
        `round ${round}: ${burst} accepts in ${secs.toFixed(2)} s = ${(burst / secs).toFixed(0)} accepts/s; accept p50 ${pct(ms, 50).toFixed(0)} ms, p95 ${pct(ms, 95).toFixed(0)} ms, p99 ${pct(ms, 99).toFixed(0)} ms; orchestrator CPU ${perAccept.toFixed(2)} ms per accept; load average before ${load.toFixed(2)}; CPU ${cpu()}`,
      );
    }
  } finally {
    await http.close();
    await orch.stop();
    const admin = new Kafka({ brokers, clientId: 'bench-accept-admin', logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    await admin.deleteTopics({ topics: (await admin.listTopics()).filter((t) => t.startsWith(prefix)) });
    await admin.disconnect();
  }
}

runBench(main);
