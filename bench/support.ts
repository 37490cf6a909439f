import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { Pool } from 'undici';
import { cpuMeter, localStackPids, peakRssMiB } from '@keyflow/observability';
import { startServiceProcess, type EventuallyOptions } from '@keyflow/testing';
import { Kafka, logLevel, type Consumer } from '@keyflow/kafka';
import type { DecodedEvent, EventCodec } from '@keyflow/contracts';
import { Topic } from '@keyflow/schemas';

export const ROOT = join(__dirname, '..');

/** The topic prefixes (or whole names) this bench has created topics under: see {@link benchTopics}. */
const created: string[] = [];

/** Registers `prefix` (a bench's own, e.g. `bench-orch-<ms>.`, or one topic's name) for {@link runBench} to delete. */
export function benchTopics(prefix: string): string {
  created.push(prefix);
  return prefix;
}

/** Services this bench spawned ({@link spawnService}, {@link trackSpawned}): stopped before it exits, whichever way it ends. */
const spawned = new Set<ChildProcess>();

/**
 * Adds a child process a bench started itself (not through {@link spawnService}) to those {@link stopSpawned} stops
 * when the bench ends. Returns `proc`.
 */
export function trackSpawned(proc: ChildProcess): ChildProcess {
  spawned.add(proc);
  proc.once('exit', () => spawned.delete(proc));
  return proc;
}

/**
 * SIGTERMs `proc` and resolves when it has exited; SIGKILLs it if it is still running after `graceMs` (ms). Resolves
 * at once when it had already exited.
 */
export function stopProcess(proc: ChildProcess, graceMs = 10_000): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const kill = setTimeout(() => proc.kill('SIGKILL'), graceMs);
    proc.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    proc.kill('SIGTERM');
  });
}

/**
 * Stops ({@link stopProcess}, `graceMs` in ms) every service this bench started that is still running. Without it a
 * bench that threw (a service that never got ready, a timeout) exited and left the others running, holding their
 * ports, consumer groups and its terminal.
 */
export async function stopSpawned(graceMs = 10_000): Promise<void> {
  await Promise.all([...spawned].map((p) => stopProcess(p, graceMs)));
}

/**
 * Runs a bench's `main`, stops the services it spawned and left running ({@link stopSpawned}), then deletes every
 * topic whose name starts with a prefix given to {@link benchTopics}, and exits (0, or 1 when `main` threw). Benches run one after another on the same local broker: left in place, each run's
 * partitions (175 for bench:orchestrator) made every later all-topics Metadata request (kafkajs admin listTopics, the
 * orchestrator's lag pass) and the broker's periodic work larger, and later figures slower. A failed deletion is
 * printed, not thrown: the figures are already out. KAFKA_BROKERS names the broker (default 127.0.0.1:9092).
 */
export function runBench(main: () => Promise<unknown>): void {
  const cleanup = async () => {
    if (created.length === 0) return;
    const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
    await deleteTopicsUnder(brokers, created).catch((e: Error) =>
      console.error(`the bench's topics (${created.join(', ')}) were not all deleted: ${e.message}`),
    );
  };
  main().then(
    () =>
      stopSpawned()
        .then(cleanup)
        .then(() => process.exit(0)),
    (e) => {
      console.error(e);
      void stopSpawned()
        .then(cleanup)
        .then(() => process.exit(1));
    },
  );
}

/**
 * Deletes every topic of the cluster at `brokers` whose name starts with one of `prefixes`, 100 a request.
 * @throws the admin client's error (connection, deletion).
 */
export async function deleteTopicsUnder(brokers: string[], prefixes: readonly string[]): Promise<void> {
  const admin = new Kafka({ brokers, clientId: 'bench-cleanup', logLevel: logLevel.NOTHING }).admin();
  try {
    await admin.connect();
    const topics = (await admin.listTopics()).filter((t) => prefixes.some((p) => t.startsWith(p)));
    for (let i = 0; i < topics.length; i += 100)
      await admin.deleteTopics({ topics: topics.slice(i, i + 100), timeout: 60_000 });
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

/**
 * Reads `topic` (physical) from its start in a fresh consumer group (`group`, the caller's own name under its
 * prefix), read_committed unless `readUncommitted`; calls `each` with every record's value and location in partition
 * order (`at.timestamp`: the record's, epoch ms as kafkajs gives it). A fetch is answered as soon as a record arrives and waits at most 1,000 ms for one (it waited 50 ms: an
 * idle reader then made 20 fetch requests a second on the broker under test). Commits no offsets: the group is never
 * resumed, and each commit would be one more request on that broker. Resolves once the consumer runs, with it (disconnect it when
 * done). `onBatchEnd`, when given, is called after each fetched batch of a partition with the offset after its last
 * record (kafkajs's END_BATCH_PROCESS, listened to before the consumer runs), also for a batch of transaction
 * markers or aborted records only, which calls `each` for none: what a reader needs to know it read up to an offset.
 * @throws the client's error when the consumer cannot connect or subscribe; an error of `each` crashes the consumer
 *   (kafkajs retries the record), as a bench's reader may not skip what it counts
 */
export async function readFromStart(
  kafka: Kafka,
  group: string,
  topic: string,
  readUncommitted: boolean,
  each: (
    value: Buffer | null,
    at: { topic: string; partition: number; offset: string; timestamp: string },
  ) => unknown,
  onBatchEnd?: (partition: number, next: bigint) => void,
): Promise<Consumer> {
  const consumer = kafka.consumer({ groupId: group, readUncommitted, maxWaitTimeInMs: 1_000 });
  if (onBatchEnd)
    consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) =>
      onBatchEnd(payload.partition, BigInt(payload.lastOffset) + 1n),
    );
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic: t, partition, message }) => {
      await each(message.value, {
        topic: t,
        partition,
        offset: message.offset,
        timestamp: message.timestamp,
      });
    },
  });
  return consumer;
}

/**
 * {@link readFromStart} of `codec`'s wf.events (read_committed), calling `onEvent` with each decoded lifecycle event.
 * The codec must have registered Topic.WF_EVENTS. @throws as readFromStart; a record that does not decode crashes
 * the consumer
 */
export function readLifecycle(
  kafka: Kafka,
  codec: EventCodec,
  group: string,
  onEvent: (d: DecodedEvent) => void,
): Promise<Consumer> {
  return readFromStart(kafka, group, codec.physical(Topic.WF_EVENTS), false, async (value, at) =>
    onEvent(await codec.decode(Topic.WF_EVENTS, value, at)),
  );
}

/**
 * {@link readFromStart} of `codec`'s task.results (read_committed), calling `onResult` with each decoded result
 * (TaskCompleted, TaskFailed) and the record's location and timestamp; wait reports (TaskWaiting: progress, not a
 * result) are left out. The codec must have registered Topic.TASK_RESULTS. @throws as readFromStart; a record that
 * does not decode crashes the consumer
 */
export function readResults(
  kafka: Kafka,
  codec: EventCodec,
  group: string,
  onResult: (d: DecodedEvent, at: { partition: number; offset: string; timestamp: string }) => void,
): Promise<Consumer> {
  return readFromStart(kafka, group, codec.physical(Topic.TASK_RESULTS), false, async (value, at) => {
    const d = await codec.decode(Topic.TASK_RESULTS, value, at);
    if (d.event !== 'TaskWaiting') onResult(d, at);
  });
}

/**
 * `value` (a flag's or a variable's text) as a positive integer.
 * @throws Error naming `name` when it is not one
 */
export function positiveInt(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer, not ${value}`);
  return n;
}

/** Percentile `p` (0-100) of `xs` (nearest rank). */
export const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] : NaN;
};

/**
 * Options of {@link eventually} for a benchmark's wait for `what`: polls every 20 ms, gives up after `timeoutMs`, and
 * at once when one of `services` (from {@link spawnService}) has exited on its own: a crashed worker fails the
 * benchmark instead of leaving it waiting.
 */
export function benchWait(
  timeoutMs: number,
  what: string,
  services: ReadonlyArray<{ exited: () => string | undefined }> = [],
): EventuallyOptions<boolean> {
  return { timeoutMs, intervalMs: 20, check: () => assertRunning(services, what) };
}

/** Throws, naming what was awaited, when one of `services` (from {@link spawnService}) has exited on its own. */
export function assertRunning(services: ReadonlyArray<{ exited: () => string | undefined }>, what: string) {
  for (const s of services) {
    const gone = s.exited();
    if (gone) throw new Error(`benchmark stopped waiting for ${what}: ${gone}`);
  }
}

/** Peak resident set size of a process in MiB (VmHWM), NaN when it is gone. */
export const peakRssMb = (pid: number | undefined): number => peakRssMiB(pid) ?? NaN;

/**
 * Starts measuring the CPU used by each named process (this one is `bench`, the local stack's by their names); the
 * returned function answers each one's share since then, in cores (CPU seconds over wall seconds: 1 is one core, 2
 * both cores of this machine).
 */
export function cpuShares(pids: Record<string, number | undefined>): () => Record<string, number> {
  const used = cpuMeter({ bench: process.pid, ...localStackPids(ROOT), ...pids });
  const t0 = Date.now();
  return () => {
    const wall = (Date.now() - t0) / 1000;
    return Object.fromEntries(Object.entries(used()).map(([n, s]) => [n, s / wall]));
  };
}

/** Shares of {@link cpuShares} as `name N% ...` (percent of one core; 200 % is both cores of this machine). */
export const formatShares = (shares: Record<string, number>): string =>
  Object.entries(shares)
    .map(([n, s]) => `${n} ${(s * 100).toFixed(0)}%`)
    .join(', ');

/** {@link cpuShares}, printed as {@link formatShares} does. */
export function cpuSplit(pids: Record<string, number | undefined>): () => string {
  const shares = cpuShares(pids);
  return () => formatShares(shares());
}

/**
 * An HTTP/1.1 client for `origin` (undici's Pool: up to `connections` keep-alive connections, no pipelining), far
 * cheaper per request than the global `fetch`, so the bench's own client takes less of the machine's two cores.
 * `post` sends a JSON body and resolves with the status and the parsed JSON answer (undefined when empty).
 */
export function httpClient(origin: string, connections = 64) {
  const pool = new Pool(origin, { connections });
  return {
    async post(
      path: string,
      body?: unknown,
      headers: Record<string, string> = {},
    ): Promise<{ status: number; json: unknown }> {
      const res = await pool.request({
        path,
        method: 'POST',
        headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.body.text();
      return { status: res.statusCode, json: text ? JSON.parse(text) : undefined };
    },
    close: () => pool.close(),
  };
}

/**
 * An OTLP/HTTP endpoint that accepts every export and keeps only a count of requests and bytes (a collector that
 * costs nothing), for benchmarks with tracing on.
 */
export async function otlpSink(): Promise<{
  url: string;
  stats: { requests: number; bytes: number };
  close: () => void;
}> {
  const { createServer } = await import('node:http');
  const stats = { requests: 0, bytes: 0 };
  const server = createServer((req, res) => {
    req.on('data', (c: Buffer) => (stats.bytes += c.length));
    req.on('end', () => {
      stats.requests++;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, stats, close: () => server.close() };
}

/**
 * Settings for one kind of spawned service alone: every `BENCH_<SERVICE>_<NAME>` variable is given to that service
 * as `<NAME>` (e.g. `BENCH_WORKER_KAFKA_BROKERS` and `BENCH_WORKER_KAFKA_SECURITY_PROTOCOL=SASL_SSL` point the workers
 * at a SASL_SSL listener, `BENCH_ORCHESTRATOR_...` the orchestrator, while the bench's own producers and consumers
 * keep the plaintext one), to measure TLS and auth on and off.
 * @param service `WORKER` or `ORCHESTRATOR`.
 * @returns the service's own variables, without the prefix (empty when none is set).
 */
export function serviceOnlyEnv(service: 'WORKER' | 'ORCHESTRATOR'): Record<string, string> {
  const prefix = `BENCH_${service}_`;
  return Object.fromEntries(
    Object.entries(process.env)
      .filter(([k, v]) => k.startsWith(prefix) && v !== undefined)
      .map(([k, v]) => [k.slice(prefix.length), v as string]),
  );
}

type OtlpSink = Awaited<ReturnType<typeof otlpSink>>;

/**
 * What a bench prints about tracing: on, to `sink` (its --otlp) or to an endpoint the services inherit from the
 * shell (OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), or off.
 */
export function tracingLine(sink: OtlpSink | undefined): string {
  const inherited =
    process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || process.env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  if (sink) return `tracing: on (OTLP/HTTP export to a sink at ${sink.url})`;
  return inherited ? `tracing: on (the shell's endpoint ${inherited})` : 'tracing: off (no OTLP endpoint)';
}

/** Prints what `sink` received (requests, MiB) and closes it; nothing without a sink. */
export function closeSink(sink: OtlpSink | undefined): void {
  if (!sink) return;
  console.log(
    `spans exported: ${sink.stats.requests} OTLP requests, ${(sink.stats.bytes / 1048576).toFixed(1)} MiB`,
  );
  sink.close();
}

/**
 * Spawns a service entry point ({@link startServiceProcess}, its stderr shown live); `ready` resolves with its HTTP
 * URL when it logs `readyMsg`. `nodeArgs`: extra Node options before the entry (e.g. `--cpu-prof`, which NODE_OPTIONS
 * does not accept).
 */
export function spawnService(
  entry: string,
  env: Record<string, string>,
  readyMsg: string,
  nodeArgs: string[] = [],
) {
  const { proc, ready } = startServiceProcess(join(ROOT, entry), env, readyMsg, {
    cwd: ROOT,
    nodeArgs,
    inheritStderr: true,
    keepLines: 40,
    name: entry,
  });
  trackSpawned(proc);
  let stopping = false;
  const ended = () => proc.exitCode !== null || proc.signalCode !== null;
  return {
    proc,
    ready,
    /** Why the process ended without `stop` (its entry and exit code or signal), else undefined. */
    exited: (): string | undefined =>
      !stopping && ended()
        ? `${entry} exited on its own (code ${proc.exitCode ?? proc.signalCode})`
        : undefined,
    peakRssMb: () => peakRssMb(proc.pid),
    /** SIGTERM, then SIGKILL after 10 s ({@link stopProcess}); resolves when the process has exited. */
    stop: () => {
      stopping = true;
      return stopProcess(proc);
    },
  };
}
