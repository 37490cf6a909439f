/**
 * Undecodable record batches, per partition.
 *
 * kafkajs 2.2.4 decompresses a record batch inside its fetch-response parser, which knows no topic or partition: a
 * codec that throws there fails the whole fetch (every partition led by that broker), again on every refetch. So the
 * guarded codecs (./codecs) do not throw: they hand kafkajs a stand-in for the batch, `records` records (the count in
 * the batch header, which kafkajs's decoder loops over) that carry no key or value and one header,
 * {@link UNDECODABLE_HEADER}, whose value names the codec, the batch's offsets and the reason, with a nonce of this
 * process (so a producer cannot forge the marker). Every stand-in record sits at the batch's last offset, which is
 * never below the fetch offset (the broker returns a batch only when its last offset is at or past it), so kafkajs
 * never filters them all out and moves past the batch. The stand-ins inherit the batch's producer id and
 * transactional flags, so a batch of an aborted transaction is still filtered out under read_committed.
 *
 * The consumers (OrderedConsumer, the orchestrator's engine and read model) look for the marker with
 * {@link undecodableAt}: they work the messages before it, resolve and commit nothing from it on, and quarantine the
 * partition ({@link PartitionQuarantine}): paused at the broker, named in /health (`degraded`, code
 * UNDECODABLE_BATCH) and in the metrics `keyflow_undecodable_batches_total{topic,partition}` and
 * `keyflow_quarantined_partitions`. Other partitions flow. Every `retryMs` the partition is resumed and fetched
 * again from the same offset: a fix (a codec deployed, which also takes a restart; an operator resetting the
 * group's offset past the batch) takes effect without anything else; if the batch still cannot be read, it is
 * quarantined again. Nothing is skipped and the process does not exit or loop.
 */
import { randomUUID } from 'node:crypto';
import type { ComponentHealth, Logger, Registry } from '@keyflow/observability';
import { metric } from '@keyflow/observability';
import type { KafkaMessage } from 'kafkajs';

/** The header of a stand-in record (see the module doc). */
export const UNDECODABLE_HEADER = 'keyflow.undecodable';

/** The health code of a quarantined partition; also UndecodableBatchError's code. */
export const UNDECODABLE_CODE = 'UNDECODABLE_BATCH';

/**
 * Default ms between tries of a quarantined partition: KEYFLOW_UNDECODABLE_RETRY_MS, else 60 000. One fetch of
 * the bad batch per try, so a quarantined partition costs next to nothing.
 */
export const UNDECODABLE_RETRY_MS = Number(process.env.KEYFLOW_UNDECODABLE_RETRY_MS ?? 60_000);

/** A stand-in batch bigger than this many records is refused (the fetch fails as before): a corrupt header. */
const MAX_STAND_IN_RECORDS = 1_000_000;

const PROCESS_NONCE = randomUUID();

/** What the codec knew of a batch it could not decode. Offsets are decimal strings (int64). */
export interface UndecodableBatch {
  codecId: number;
  baseOffset: string;
  lastOffset: string;
  records: number;
  reason: string;
}

// Kafka's record varints are zigzag-encoded (protobuf's), as kafkajs's Decoder.readVarInt reads them.
function varint(out: number[], n: number): void {
  let v = ((n << 1) ^ (n >> 31)) >>> 0;
  while (v > 0x7f) {
    out.push((v & 0x7f) | 0x80);
    v >>>= 7;
  }
  out.push(v);
}

/**
 * The decompressed bytes kafkajs gets instead of `batch`'s: `batch.records` records (message format v2 record
 * layout: length, attributes, timestamp delta, offset delta, key, value, headers), each at offset delta
 * `lastOffset - baseOffset`, null key and value, and the {@link UNDECODABLE_HEADER} header.
 * @returns undefined when the batch has no records or more than a sane number (then the codec throws instead).
 */
export function standInRecords(batch: UndecodableBatch): Buffer | undefined {
  if (batch.records <= 0 || batch.records > MAX_STAND_IN_RECORDS) return undefined;
  const delta = Number(BigInt(batch.lastOffset) - BigInt(batch.baseOffset));
  const key = Buffer.from(UNDECODABLE_HEADER);
  const value = Buffer.from(
    JSON.stringify({
      nonce: PROCESS_NONCE,
      codecId: batch.codecId,
      baseOffset: batch.baseOffset,
      lastOffset: batch.lastOffset,
      reason: batch.reason.slice(0, 500),
    }),
  );
  const body: number[] = [0, 0]; // attributes int8 0, timestamp delta varlong 0
  varint(body, delta);
  varint(body, -1); // key: null
  varint(body, -1); // value: null
  varint(body, 1); // one header
  varint(body, key.length);
  const head = Buffer.from(body);
  const valueLen: number[] = [];
  varint(valueLen, value.length);
  const record = Buffer.concat([head, key, Buffer.from(valueLen), value]);
  const len: number[] = [];
  varint(len, record.length);
  const one = Buffer.concat([Buffer.from(len), record]);
  const out = Buffer.allocUnsafe(one.length * batch.records);
  for (let i = 0; i < batch.records; i++) one.copy(out, i * one.length);
  return out;
}

/** The batch a stand-in record stands for, or undefined for any other record (including a forged header). */
export function undecodableBatchOf(
  message: Pick<KafkaMessage, 'headers' | 'key' | 'value'>,
): UndecodableBatch | undefined {
  const h = message.headers?.[UNDECODABLE_HEADER];
  if (!h || message.value !== null || Array.isArray(h)) return undefined;
  try {
    const v = JSON.parse(h.toString()) as UndecodableBatch & { nonce: string };
    if (v.nonce !== PROCESS_NONCE) return undefined;
    return {
      codecId: v.codecId,
      baseOffset: v.baseOffset,
      lastOffset: v.lastOffset,
      records: 0,
      reason: v.reason,
    };
  } catch {
    return undefined;
  }
}

/** The index of the first stand-in record in `messages` and its batch, or undefined when every one is real. */
export function undecodableAt<M extends Pick<KafkaMessage, 'headers' | 'key' | 'value'>>(
  messages: readonly M[],
): { index: number; batch: UndecodableBatch } | undefined {
  for (let i = 0; i < messages.length; i++) {
    const batch = undecodableBatchOf(messages[i]);
    if (batch) return { index: i, batch };
  }
  return undefined;
}

/** A partition paused on an undecodable batch, as stats and /health report it. `since` is ms since epoch. */
export interface QuarantinedPartition {
  topic: string;
  partition: number;
  code: typeof UNDECODABLE_CODE;
  codecId: number;
  baseOffset: string;
  lastOffset: string;
  reason: string;
  since: number;
  /** Tries so far (1 on the first quarantine). */
  tries: number;
}

interface QuarantineMetrics {
  batches: ReturnType<typeof metric.counter>;
  quarantined: ReturnType<typeof metric.gauge>;
}
const metricsByRegistry = new WeakMap<Registry, QuarantineMetrics>();

/** The quarantine metrics of `registry`, made once per registry (every consumer of a process shares them). */
function quarantineMetrics(registry: Registry): QuarantineMetrics {
  let m = metricsByRegistry.get(registry);
  if (!m) {
    m = {
      batches: metric.counter(
        registry,
        'undecodable_batches_total',
        'Fetches that met a record batch no codec could decode (counted per try), by topic and partition.',
        ['topic', 'partition'],
      ),
      quarantined: metric.gauge(
        registry,
        'quarantined_partitions',
        'Partitions paused on an undecodable record batch (see /health degraded).',
        ['topic', 'partition'],
      ),
    };
    metricsByRegistry.set(registry, m);
  }
  return m;
}

/** How a consumer pauses and resumes one partition (kafkajs's consumer.pause/resume). */
export interface PartitionSwitch {
  pause(topic: string, partition: number): void;
  resume(topic: string, partition: number): void;
}

/**
 * The partitions of one consumer that are paused on an undecodable batch (see the module doc). The consumer calls
 * {@link add} when it meets a stand-in record (after working the messages before it, committing nothing from it on),
 * {@link drop} when the partition is revoked, and {@link close} when it stops.
 */
export class PartitionQuarantine {
  private readonly entries = new Map<string, { q: QuarantinedPartition; timer: NodeJS.Timeout }>();
  /** Per partition: the base offset of the batch last logged, and the tries on it. */
  private readonly tries = new Map<string, { baseOffset: string; count: number }>();
  private readonly metrics?: QuarantineMetrics;

  /**
   * @param o.component the name /health gives the consumer (e.g. `worker-consumer`)
   * @param o.retryMs ms until a quarantined partition is tried again (default {@link UNDECODABLE_RETRY_MS})
   */
  constructor(
    private readonly o: {
      component: string;
      partitions: PartitionSwitch;
      logger: Logger;
      health?: ComponentHealth;
      registry?: Registry;
      retryMs?: number;
    },
  ) {
    this.metrics = o.registry ? quarantineMetrics(o.registry) : undefined;
  }

  /** Pauses `topic`/`partition` on `batch` and schedules its next try. */
  add(topic: string, partition: number, batch: UndecodableBatch): void {
    const tp = `${topic}:${partition}`;
    const existing = this.entries.get(tp);
    if (existing) clearTimeout(existing.timer);
    const last = this.tries.get(tp);
    const tries = last?.baseOffset === batch.baseOffset ? last.count + 1 : 1;
    this.tries.set(tp, { baseOffset: batch.baseOffset, count: tries });
    const q: QuarantinedPartition = {
      topic,
      partition,
      code: UNDECODABLE_CODE,
      codecId: batch.codecId,
      baseOffset: batch.baseOffset,
      lastOffset: batch.lastOffset,
      reason: batch.reason,
      since: existing?.q.since ?? Date.now(),
      tries,
    };
    this.o.partitions.pause(topic, partition);
    const retryMs = this.o.retryMs ?? UNDECODABLE_RETRY_MS;
    const timer = setTimeout(() => this.retry(tp), retryMs);
    timer.unref();
    this.entries.set(tp, { q, timer });
    this.metrics?.batches.inc({ topic, partition: String(partition) });
    this.metrics?.quarantined.set({ topic, partition: String(partition) }, 1);
    const message =
      `${UNDECODABLE_CODE}: ${tp} is paused at a record batch compressed with Kafka codec id ${batch.codecId} ` +
      `(offsets ${batch.baseOffset}..${batch.lastOffset}) that cannot be decoded: ${batch.reason}. ` +
      `Retried every ${retryMs} ms; other partitions flow`;
    this.o.health?.degrade(`${this.o.component}:${tp}`, { code: UNDECODABLE_CODE, error: message });
    if (tries === 1) this.o.logger.error({ ...q, retryMs }, message);
  }

  /** Whether `topic`/`partition` is quarantined now (its consumer must keep it paused). */
  has(topic: string, partition: number): boolean {
    return this.entries.has(`${topic}:${partition}`);
  }

  /** Forgets a partition this consumer no longer owns (its new owner meets the batch itself). */
  drop(topic: string, partition: number): void {
    this.release(`${topic}:${partition}`);
    this.tries.delete(`${topic}:${partition}`);
  }

  list(): QuarantinedPartition[] {
    return [...this.entries.values()].map((e) => e.q);
  }

  close(): void {
    for (const tp of [...this.entries.keys()]) this.release(tp);
  }

  private retry(tp: string): void {
    const e = this.entries.get(tp);
    if (!e) return;
    this.release(tp);
    this.o.partitions.resume(e.q.topic, e.q.partition);
  }

  private release(tp: string): void {
    const e = this.entries.get(tp);
    if (!e) return;
    clearTimeout(e.timer);
    this.entries.delete(tp);
    this.metrics?.quarantined.remove({ topic: e.q.topic, partition: String(e.q.partition) });
    this.o.health?.recover(`${this.o.component}:${tp}`);
  }
}
