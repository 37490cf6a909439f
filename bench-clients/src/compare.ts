import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Command } from 'commander';
import { Kafka, logLevel } from 'kafkajs';
import { kafkajsClient } from './kafkajs';
import type { ClientUnderTest } from './types';

/**
 * The Kafka client comparison of issue 40 (docs/adr/0001-kafka-client.md): for each client that loads, in the same
 * run, interleaved (A, B, A, B: every client sees the same load; the order rotates each round), the batched relay
 * and the transactional relay (msgs/s over the same `--records` source records) and a 3-hop chain at a fixed
 * offered rate (p50/p95/p99 ms). Each figure is printed with /proc/loadavg read right after it: the machine is
 * shared, so read figures of one run against each other, not against another run's.
 * Run: npm run bench:clients -- [--records N] [--rate R] [--seconds S] [--rounds K]
 */
const opts = new Command()
  .option('--records <n>', 'source records each relay reads', '20000')
  .option('--value-bytes <n>', 'bytes per record value', '200')
  .option('--rate <n>', 'chain offered load, records/s', '50')
  .option('--seconds <n>', 'chain duration per client, s', '10')
  .option('--rounds <n>', 'rounds (each runs every measurement once per client)', '1')
  .option('--only <names>', 'comma-separated: kafkajs,platformatic,confluent')
  .option('--measure <kinds>', 'comma-separated: batched,tx,chain', 'batched,tx,chain')
  .parse()
  .opts<{
    records: string;
    valueBytes: string;
    rate: string;
    seconds: string;
    rounds: string;
    only?: string;
    measure: string;
  }>();
const measure = new Set(opts.measure.split(','));

const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const run = `bench-clients-${Date.now().toString(36)}`;
const loadavg = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** The version in a package's package.json, found beside its entry point (ESM packages do not export it). */
function versionOf(pkg: string): string {
  let dir = dirname(require.resolve(pkg));
  for (let i = 0; i < 5; i++, dir = dirname(dir)) {
    try {
      const json = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
        name?: string;
        version: string;
      };
      if (json.name === pkg) return json.version;
    } catch {
      /* not here */
    }
  }
  return '?';
}

/** The clients that load here; a client that does not load is reported with its error and skipped. */
function clients(): { ok: { key: string; c: ClientUnderTest }[]; failed: string[] } {
  const want = opts.only?.split(',') ?? ['kafkajs', 'platformatic', 'confluent'];
  const ok: { key: string; c: ClientUnderTest }[] = [];
  const failed: string[] = [];
  const loaders: Record<string, () => ClientUnderTest> = {
    kafkajs: () => kafkajsClient(versionOf('kafkajs')),
    // Loaded on demand: bench-clients/node_modules exists only once `npm run bench:clients` installed it.
    platformatic: () => {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const m = require('./platformatic') as typeof import('./platformatic');
      return m.platformaticClient(versionOf('@platformatic/kafka'));
    },
    confluent: () => {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const m = require('./confluent') as typeof import('./confluent');
      return m.confluentClient(versionOf('@confluentinc/kafka-javascript'));
    },
  };
  for (const key of want) {
    try {
      ok.push({ key, c: loaders[key]() });
    } catch (e) {
      failed.push(`${key}: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  return { ok, failed };
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};

async function main() {
  const { ok, failed } = clients();
  for (const f of failed) console.log(`not measured: ${f}`);
  const n = Number(opts.records);
  const kafka = new Kafka({ brokers, clientId: 'bench-clients', logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const topic = (name: string) => `${run}.${name}`;
  /** Creates the topics (6 partitions) and waits for their leaders; the metadata wait is retried on a busy broker. */
  const create = async (...names: string[]) => {
    for (let attempt = 1; ; attempt++) {
      try {
        await admin.createTopics({
          waitForLeaders: true,
          topics: names.map((t) => ({ topic: t, numPartitions: 6 })),
        });
        return;
      } catch (e) {
        if (attempt >= 5) throw e;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  };

  // The source every relay reads: n keyed records, 6 partitions, written once.
  const source = topic('source');
  await create(source);
  const filler = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await filler.connect();
  const value = Buffer.alloc(Number(opts.valueBytes), 'x');
  for (let i = 0; i < n; i += 5000)
    await filler.send({
      topic: source,
      acks: -1,
      messages: Array.from({ length: Math.min(5000, n - i) }, (_, j) => ({ key: `k${i + j}`, value })),
    });
  await filler.disconnect();

  const rows = new Map<string, Record<string, string[]>>(ok.map(({ c }) => [c.name, {}]));
  const note = (c: ClientUnderTest, col: string, figure: string) => {
    const cell = `${figure} (load ${loadavg()})`;
    (rows.get(c.name)![col] ??= []).push(cell);
    console.log(`${c.name.padEnd(34)} ${col.padEnd(20)} ${cell}`);
  };

  for (let round = 0; round < Number(opts.rounds); round++) {
    const order = ok.map((_, i) => ok[(i + round) % ok.length]);
    for (const { key, c } of measure.has('batched') ? order : []) {
      const out = topic(`batched-${key}-${round}`);
      await create(out);
      try {
        const r = await c.batchedRelay({ brokers, source, out, group: `${out}.g`, n });
        note(c, 'batched relay', `${(n / r.secs).toFixed(0)} msgs/s, ${(n / r.batches).toFixed(0)}/batch`);
      } catch (e) {
        note(c, 'batched relay', `failed: ${(e as Error).message}`);
      }
    }
    for (const { key, c } of measure.has('tx') ? order : []) {
      const out = topic(`tx-${key}-${round}`);
      await create(out);
      try {
        const r = await c.transactionalRelay({ brokers, source, out, group: `${out}.g`, n });
        note(c, 'transactional relay', `${(n / r.secs).toFixed(0)} msgs/s, ${(n / r.batches).toFixed(0)}/tx`);
      } catch (e) {
        note(c, 'transactional relay', `failed: ${(e as Error).message}`);
      }
    }
    for (const { key, c } of measure.has('chain') ? order : []) {
      const [head, mid, tail] = ['head', 'mid', 'tail'].map((t) => topic(`chain-${key}-${round}.${t}`));
      await create(head, mid, tail);
      try {
        note(c, '3-hop chain', await chain(c, head, mid, tail, `${run}.chain-${key}-${round}.`));
      } catch (e) {
        note(c, '3-hop chain', `failed: ${(e as Error).message}`);
      }
    }
  }
  // Its topics go (the shared broker holds every engineer's topics: it ran out of heap once during these runs).
  const created = (await admin.listTopics()).filter((t) => t.startsWith(`${run}.`));
  for (let i = 0; i < created.length; i += 50) await admin.deleteTopics({ topics: created.slice(i, i + 50) });
  await admin.disconnect();

  console.log(
    `\n${new Date().toISOString()}  node ${process.version}  ${n} records of ${opts.valueBytes} B, 6 partitions; chain ${opts.rate}/s for ${opts.seconds} s`,
  );
  console.log('| client | batched relay | transactional relay | 3-hop chain p50/p95/p99 |');
  console.log('| --- | --- | --- | --- |');
  for (const [name, cols] of rows)
    console.log(
      `| ${name} | ${(cols['batched relay'] ?? []).join('<br>')} | ${(cols['transactional relay'] ?? []).join('<br>')} | ${(cols['3-hop chain'] ?? []).join('<br>')} |`,
    );
}

/** The chain at `--rate` records/s for `--seconds`: latency from before the head send to the sink reading it. */
async function chain(
  c: ClientUnderTest,
  head: string,
  mid: string,
  tail: string,
  prefix: string,
): Promise<string> {
  const doneAt = new Map<string, number>();
  const waiters = new Map<string, () => void>();
  const running = await c.startChain({
    brokers,
    head,
    mid,
    tail,
    prefix,
    onDone: (id) => {
      if (!doneAt.has(id)) doneAt.set(id, Date.now());
      waiters.get(id)?.();
    },
  });
  const arrived = (id: string, ms: number) =>
    new Promise<void>((resolve, reject) => {
      if (doneAt.has(id)) return resolve();
      const t = setTimeout(() => reject(new Error(`${id} not through the chain in ${ms} ms`)), ms);
      waiters.set(id, () => (clearTimeout(t), resolve()));
    });
  try {
    // Warm-up: group joins, producer ids, the first transaction, before measuring.
    const warm = arrived('warmup', Number(process.env.BENCH_CLIENTS_WARMUP_MS ?? 120_000));
    await running.send('warmup');
    await warm;
    const rate = Number(opts.rate);
    const total = rate * Number(opts.seconds);
    const startedAt = new Map<string, number>();
    const sends: Promise<void>[] = [];
    const t0 = Date.now();
    for (let i = 0; i < total; i++) {
      const wait = t0 + (i * 1000) / rate - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const id = `r${i}`;
      startedAt.set(id, Date.now());
      sends.push(running.send(id));
    }
    await Promise.all(sends);
    await Promise.all([...startedAt.keys()].map((id) => arrived(id, 60_000)));
    const lat = [...startedAt].map(([id, t]) => doneAt.get(id)! - t);
    return `${pct(lat, 50)}/${pct(lat, 95)}/${pct(lat, 99)} ms (n=${lat.length})`;
  } finally {
    await running.stop();
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
