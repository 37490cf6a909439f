/**
 * A team's producers and admin tools, not keyflow's: keyed JSON records written by the Java client (Kafka's own
 * ConsoleProducer from the jars infra/local/stack.sh cached, see {@link javaKafkaClient}) and by kcat (librdkafka),
 * a topic created with Kafka's own TopicCommand (kafka-topics.sh) and a group reset with its ConsumerGroupCommand
 * (kafka-consumer-groups.sh). What a topic trigger reads is then what any team's producers put on its topic.
 */
import { produceWithJavaClient, produceWithKcat, runToEnd, type KcatCodec } from './kcat';

/** A keyed record whose value is written as JSON text (one line: JSON.stringify never emits a raw newline). */
export interface JsonRecord {
  key: string;
  value: unknown;
}

/** The Java tools' main classes in Kafka 4.x's kafka-tools jar (what bin/kafka-*.sh run). */
export const JAVA_TOOLS = {
  topics: 'org.apache.kafka.tools.TopicCommand',
  consumerGroups: 'org.apache.kafka.tools.consumer.group.ConsumerGroupCommand',
} as const;

/** How long one Java tool run may take, ms (a JVM start is about 2 s on an idle machine, far more on a busy one). */
const JAVA_TOOL_TIMEOUT_MS = 120_000;

/** The text line of one record: JSON.stringify of its value. @throws Error when the key holds a tab or newline */
export function jsonLine(r: JsonRecord): { key: string; value: string } {
  if (/[\t\n\r]/.test(r.key)) throw new Error(`key ${JSON.stringify(r.key)} holds a tab or newline`);
  const value = typeof r.value === 'string' ? r.value : JSON.stringify(r.value);
  if (value === undefined) throw new Error(`the value of key ${r.key} has no JSON form`);
  return { key: r.key, value };
}

/**
 * Produces `records` (values as JSON text; a string value is written as it is, e.g. a record that is not JSON) to
 * `topic` with the Java client, keyed (Kafka's default partitioner: murmur2 of the key), compressed with `codec`,
 * acks=all with the client's default idempotence: a key's records keep their order. One JVM for all of them.
 * @throws Error with the JVM's stderr when it exits non-zero, or when a key or value holds a tab or newline
 */
export async function produceJsonWithJavaClient(opts: {
  classpath: string;
  brokers: string[];
  topic: string;
  codec: KcatCodec;
  records: JsonRecord[];
}): Promise<void> {
  const lines = opts.records.map(jsonLine);
  for (const l of lines)
    if (/[\t\n\r]/.test(l.value)) throw new Error(`the value of key ${l.key} holds a tab or newline`);
  await produceWithJavaClient({ ...opts, records: lines });
}

/**
 * Produces `records` (values as {@link produceJsonWithJavaClient}) to `topic` with kcat, compressed with `codec`
 * (default zstd), keyed by murmur2 as the Java client places keys, with librdkafka's idempotence on so that a retried
 * batch cannot overtake a later one: a key's records keep their order.
 * @throws Error with kcat's stderr when it exits non-zero
 */
export async function produceJsonWithKcat(opts: {
  brokers: string[];
  topic: string;
  codec?: KcatCodec;
  records: JsonRecord[];
}): Promise<void> {
  await produceWithKcat({
    brokers: opts.brokers,
    topic: opts.topic,
    codec: opts.codec ?? 'zstd',
    config: { 'enable.idempotence': 'true' },
    records: opts.records.map((r) => {
      const l = jsonLine(r);
      return { key: l.key, value: Buffer.from(l.value) };
    }),
  });
}

/** The arguments of `java` running Kafka's TopicCommand `--create` (see {@link createTopicWithJavaAdmin}). */
export function createTopicArgs(o: {
  classpath: string;
  brokers: string[];
  topic: string;
  partitions: number;
  replicationFactor?: number;
  config?: Record<string, string>;
}): string[] {
  if (!Number.isInteger(o.partitions) || o.partitions < 1)
    throw new Error('partitions must be an integer >= 1');
  return [
    '-cp',
    o.classpath,
    JAVA_TOOLS.topics,
    '--bootstrap-server',
    o.brokers.join(','),
    '--create',
    '--if-not-exists',
    '--topic',
    o.topic,
    '--partitions',
    String(o.partitions),
    '--replication-factor',
    String(o.replicationFactor ?? 1),
    ...Object.entries(o.config ?? {}).flatMap(([k, v]) => ['--config', `${k}=${v}`]),
  ];
}

/**
 * Creates `topic` with Kafka's own admin tool (TopicCommand, what kafka-topics.sh runs), as a team creates its topic:
 * keyflow's admin client has no part in it. Nothing happens when it exists (`--if-not-exists`).
 * @throws Error with the JVM's stderr when it fails or takes longer than 120 s
 */
export async function createTopicWithJavaAdmin(o: Parameters<typeof createTopicArgs>[0]): Promise<void> {
  await runToEnd('java', createTopicArgs(o), JAVA_TOOL_TIMEOUT_MS, `TopicCommand --create ${o.topic}`);
}

/** The arguments of `java` running ConsumerGroupCommand `--reset-offsets --to-earliest --execute`. */
export function resetToEarliestArgs(o: {
  classpath: string;
  brokers: string[];
  group: string;
  topic: string;
}): string[] {
  return [
    '-cp',
    o.classpath,
    JAVA_TOOLS.consumerGroups,
    '--bootstrap-server',
    o.brokers.join(','),
    '--group',
    o.group,
    '--topic',
    o.topic,
    '--reset-offsets',
    '--to-earliest',
    '--execute',
  ];
}

/**
 * Resets `group`'s offsets on every partition of `topic` to the earliest, with Kafka's own ConsumerGroupCommand (what
 * `kafka-consumer-groups.sh --reset-offsets --to-earliest --execute` runs). The group must have no live member (the
 * tool refuses a group that is not empty: stop its consumers first). Resolves with the tool's table of new offsets.
 * @throws Error with the tool's output when it fails, refuses (the group is active), or takes longer than 120 s
 */
export async function resetGroupToEarliest(o: Parameters<typeof resetToEarliestArgs>[0]): Promise<string> {
  const what = `ConsumerGroupCommand --reset-offsets --to-earliest ${o.group}`;
  const out = await runToEnd('java', resetToEarliestArgs(o), JAVA_TOOL_TIMEOUT_MS, what);
  // The tool prints its refusal (e.g. "Error: Assignments can only be reset if the group ... is inactive") and may
  // still exit 0; a reset prints its table of NEW-OFFSET per partition.
  if (!/NEW-OFFSET/.test(out)) throw new Error(`${what} reset nothing: ${out}`);
  return out;
}
