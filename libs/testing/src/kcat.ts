/**
 * kcat (librdkafka's command-line client) as a producer that is not kafkajs: records it writes with
 * `compression.type` set are what Java, Go and librdkafka clients put on topics, so tests read them as they are.
 * ensureKcat installs it when missing (see debian-tool.ts).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { ensureDebianTool } from './debian-tool';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';

/** The compression codecs librdkafka's `-z` takes (Kafka codec ids 1-4). */
export type KcatCodec = 'gzip' | 'snappy' | 'lz4' | 'zstd';
export const KCAT_CODECS: readonly KcatCodec[] = ['gzip', 'snappy', 'lz4', 'zstd'];

/**
 * The path of kcat, installing Debian's `kcat` package when missing and running as root. Memoised per process.
 * @throws ToolUnavailableError when it is missing and cannot be installed (not root, no apt-get, apt failed).
 */
export function ensureKcat(): Promise<string> {
  return ensureDebianTool('kcat', 'kcat');
}

/** Why kcat cannot be had here (a test then skips with that reason), or undefined once it is installed. */
export function kcatMissing(): Promise<string | undefined> {
  return ensureKcat().then(
    () => undefined,
    (e: Error) => e.message,
  );
}

/**
 * `times` copies of one random block of `blockBytes` bytes, byte 0 set to 0xff (not the Confluent wire format's magic
 * byte 0: no codec decodes it). zstd at librdkafka's default level (a window of megabytes) finds the repeats and
 * shrinks it to about one block; gzip's 32 KiB window (RFC 1951) does not, so gzip leaves it at full size: a record a
 * zstd producer got under its topic's limit that gzip cannot bring under any limit near that one.
 */
export function longRangeRepeats(blockBytes: number, times: number): Buffer {
  const block = randomBytes(blockBytes);
  block[0] = 0xff;
  return Buffer.concat(Array.from({ length: times }, () => block));
}

/** librdkafka's version as kcat reports it (e.g. "2.0.2"), for test names and logs. */
export function kcatLibrdkafkaVersion(kcat: string): string {
  const out = execFileSync(kcat, ['-V'], { encoding: 'utf8' });
  return /librdkafka version ([^\s]+)/.exec(out)?.[1] ?? 'unknown';
}

// Chosen so that no Avro body in a test contains them; produceWithKcat checks.
const KEY_DELIMITER = '<~kcat-key~>';
const MESSAGE_DELIMITER = '<~kcat-end~>';

/**
 * Produces `records` to `topic` with kcat, compressed with `codec`, in one librdkafka batch per partition
 * (linger 50 ms), acks=all. Keys are placed by murmur2 (the Java client's partitioner) unless `partition` is set.
 * Values are raw bytes (e.g. Confluent wire format Avro); a null key is not supported. `config` adds librdkafka
 * properties (`-X name=value`), e.g. `message.max.bytes` to send a record larger than librdkafka's own default
 * limit of 1,000,000 bytes before compression (librdkafka CONFIGURATION.md).
 * @throws Error with kcat's stderr when it exits non-zero, or when a key or value contains a delimiter.
 */
export async function produceWithKcat(opts: {
  brokers: string[];
  topic: string;
  codec: KcatCodec;
  records: Array<{ key: string | Buffer; value: Buffer }>;
  partition?: number;
  config?: Record<string, string>;
  /** Headers on every record: `[name, value]`, a null value written as a null header value (KIP-82). */
  headers?: Array<[string, string | null]>;
}): Promise<void> {
  const parts: Buffer[] = [];
  for (const r of opts.records) {
    const key = Buffer.isBuffer(r.key) ? r.key : Buffer.from(r.key);
    for (const b of [key, r.value])
      if (b.includes(KEY_DELIMITER) || b.includes(MESSAGE_DELIMITER))
        throw new Error('a record contains a kcat delimiter; produceWithKcat cannot send it');
    parts.push(key, Buffer.from(KEY_DELIMITER), r.value, Buffer.from(MESSAGE_DELIMITER));
  }
  const headers = (opts.headers ?? []).flatMap(([k, v]) => ['-H', v === null ? k : `${k}=${v}`]);
  await runKcatProducer(
    opts,
    [...headers, '-K', KEY_DELIMITER, '-D', MESSAGE_DELIMITER],
    (stdin) => void stdin.end(Buffer.concat(parts)),
  );
}

/**
 * Produces one record as {@link produceWithKcat} does, its value read by kcat from a file (kcat's file mode: one
 * message per file), which takes a value of hundreds of MB in about a second where kcat's delimiter search on stdin
 * takes minutes.
 * @throws Error with kcat's stderr when it exits non-zero.
 */
export async function produceLargeWithKcat(opts: {
  brokers: string[];
  topic: string;
  codec: KcatCodec;
  key: string;
  value: Buffer;
  /** The partition to write to (default: the key's, murmur2 as kafkajs's default partitioner). */
  partition?: number;
  config?: Record<string, string>;
}): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'kcat-'));
  try {
    const file = join(dir, 'value');
    await writeFile(file, opts.value);
    await runKcatProducer(opts, ['-k', opts.key, file], (stdin) => void stdin.end());
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Runs `kcat -P` with the common settings of the producers above and `extra` arguments; `feed` writes its stdin. */
async function runKcatProducer(
  opts: {
    brokers: string[];
    topic: string;
    codec: KcatCodec;
    partition?: number;
    config?: Record<string, string>;
  },
  extra: string[],
  feed: (stdin: NodeJS.WritableStream) => void,
): Promise<void> {
  const kcat = await ensureKcat();
  const args = [
    '-P',
    '-b',
    opts.brokers.join(','),
    '-t',
    opts.topic,
    '-z',
    opts.codec,
    '-X',
    'linger.ms=50',
    '-X',
    'acks=all',
    // The Java client's partitioner (murmur2 over the key), as kafkajs's DefaultPartitioner in libs/kafka: a keyed
    // record lands where the project's own producers put that key (the engine's topics are co-partitioned by key).
    '-X',
    'partitioner=murmur2_random',
    ...(opts.partition === undefined ? [] : ['-p', String(opts.partition)]),
    ...Object.entries(opts.config ?? {}).flatMap(([k, v]) => ['-X', `${k}=${v}`]),
    ...extra,
  ];
  await new Promise<void>((resolve, reject) => {
    const child = spawn(kcat, args, { stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 && !/Delivery failed|ERROR/.test(stderr)
        ? resolve()
        : reject(new Error(`kcat -P -z ${opts.codec} to ${opts.topic} failed (exit ${code}): ${stderr}`)),
    );
    feed(child.stdin);
  });
}

/**
 * The Java client's jars that infra/local/stack.sh fetched for the broker (kafka-clients, kafka-tools, lz4-java,
 * snappy-java, zstd-jni), and a `java`: `{ classpath }` for produceWithJavaClient, or `{ missing }` saying why not.
 * Looks in $KEYFLOW_CACHE_DIR (else $XDG_CACHE_HOME/keyflow, else ~/.cache/keyflow)/kafka-$KEYFLOW_KAFKA_VERSION/libs.
 */
export function javaKafkaClient(): { classpath: string } | { missing: string } {
  const version = process.env.KEYFLOW_KAFKA_VERSION;
  if (!version) return { missing: 'KEYFLOW_KAFKA_VERSION is not set (the stack exports it)' };
  const cache =
    process.env.KEYFLOW_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'keyflow');
  const libs = join(cache, `kafka-${version}`, 'libs');
  if (!existsSync(join(libs, `kafka-tools-${version}.jar`)))
    return { missing: `no Kafka ${version} jars in ${libs}` };
  if (spawnSync('java', ['-version']).status !== 0) return { missing: 'no java on PATH' };
  return { classpath: join(libs, '*') };
}

/**
 * Produces text records with the Java client (Kafka's ConsoleProducer, acks=all, linger 50 ms, one batch), compressed
 * with `codec`: snappy through snappy-java (xerial framing), lz4 through lz4-java, zstd through zstd-jni.
 * Keys and values are text without newlines or tabs (the key separator used here). Takes a JVM start (~2 s).
 * @throws Error with the JVM's stderr when it exits non-zero
 */
export async function produceWithJavaClient(opts: {
  classpath: string;
  brokers: string[];
  topic: string;
  codec: KcatCodec;
  records: Array<{ key: string; value: string }>;
}): Promise<void> {
  const separator = '\t';
  const args = [
    '-cp',
    opts.classpath,
    'org.apache.kafka.tools.ConsoleProducer',
    '--bootstrap-server',
    opts.brokers.join(','),
    '--topic',
    opts.topic,
    '--compression-codec',
    opts.codec,
    '--property',
    'parse.key=true',
    '--property',
    `key.separator=${separator}`,
    '--producer-property',
    'linger.ms=50',
    '--producer-property',
    'acks=all',
  ];
  await new Promise<void>((resolve, reject) => {
    const child = spawn('java', args, { stdio: ['pipe', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 && !/ERROR|Exception/.test(stderr)
        ? resolve()
        : reject(
            new Error(
              `Java ConsoleProducer -z ${opts.codec} to ${opts.topic} failed (exit ${code}): ${stderr}`,
            ),
          ),
    );
    child.stdin.end(opts.records.map((r) => `${r.key}${separator}${r.value}\n`).join(''));
  });
}

/** Runs `cmd args` to its end; resolves its stdout, rejects with its stderr when it exits non-zero or times out. */
export function runToEnd(cmd: string, args: string[], timeoutMs: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(stdout);
      else reject(new Error(`${what} failed (exit ${code ?? signal}; timeout ${timeoutMs} ms): ${stderr}`));
    });
  });
}

/**
 * Reads the first `count` records of `topic` (all partitions, from the beginning) with kcat, librdkafka's consumer,
 * as text: keys and values must hold no tab or newline. Order is per partition only.
 * @throws Error with kcat's stderr when it fails (e.g. a batch librdkafka cannot decompress) or has not read `count`
 *   records within `timeoutMs` (default 30,000 ms).
 */
export async function consumeWithKcat(opts: {
  brokers: string[];
  topic: string;
  count: number;
  timeoutMs?: number;
}): Promise<Array<{ key: string; value: string }>> {
  const kcat = await ensureKcat();
  const out = await runToEnd(
    kcat,
    [
      '-C',
      '-q',
      '-b',
      opts.brokers.join(','),
      '-t',
      opts.topic,
      '-o',
      'beginning',
      '-c',
      String(opts.count),
    ].concat(['-f', '%k\\t%s\\n']),
    opts.timeoutMs ?? 30_000,
    `kcat -C ${opts.topic}`,
  );
  return textRecords(out);
}

/**
 * Reads the first `count` records of `topic` (from the beginning) with the Java client: Kafka's ConsoleConsumer from
 * the cached jars ({@link javaKafkaClient}), keys printed. Text records as {@link consumeWithKcat}. Takes a JVM start.
 * @throws Error with the JVM's stderr when it fails or has not read `count` records within `timeoutMs` (default
 *   60,000 ms).
 */
export async function consumeWithJavaClient(opts: {
  classpath: string;
  brokers: string[];
  topic: string;
  count: number;
  timeoutMs?: number;
}): Promise<Array<{ key: string; value: string }>> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const out = await runToEnd(
    'java',
    [
      '-cp',
      opts.classpath,
      'org.apache.kafka.tools.consumer.ConsoleConsumer',
      '--bootstrap-server',
      opts.brokers.join(','),
      '--topic',
      opts.topic,
      '--from-beginning',
      '--max-messages',
      String(opts.count),
      '--timeout-ms',
      String(timeoutMs),
      '--property',
      'print.key=true',
      '--property',
      'key.separator=\t',
    ],
    timeoutMs + 30_000,
    `Java ConsoleConsumer ${opts.topic}`,
  );
  return textRecords(out);
}

/** "key<TAB>value" lines as records. */
const textRecords = (out: string) =>
  out
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      const tab = l.indexOf('\t');
      return { key: l.slice(0, tab), value: l.slice(tab + 1) };
    });
