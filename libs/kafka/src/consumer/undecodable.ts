/**
 * Undecodable record batches, per partition.
 *
 * kafkajs 2.2.4 decompresses a record batch inside its fetch-response parser, which knows no topic or partition: a
 * codec that throws there fails the whole fetch (every partition led by that broker), again on every refetch. So the
 * guarded codecs (./codecs) do not throw: they hand kafkajs a stand-in for the batch, one record (kafkajs's parser,
 * patched, takes a stand-in's one record instead of looping over the count in the batch header) that carries no key
 * or value and one header, {@link UNDECODABLE_HEADER}, whose value names the codec, the batch's offsets and the
 * reason, with a nonce of this process (so a producer cannot forge the marker). The stand-in record sits at the
 * batch's last offset, which is never below the fetch offset (the broker returns a batch only when its last offset is
 * at or past it), so kafkajs never filters it out and moves past the batch. The stand-in inherits the batch's
 * producer id and transactional flags, so a batch of an aborted transaction is still filtered out under read_committed.
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

/** The stand-in buffers this process made, which kafkajs's record batch parser (patched) takes as one record. */
const standIns = new WeakSet<Buffer>();

/**
 * Whether `decompressed` is a stand-in from {@link standInRecords}: the patched kafkajs parser ("record count guard")
 * then decodes its one record instead of the batch header's count, so a stand-in costs one record however many the
 * batch held.
 */
export const isStandInRecords = (decompressed: Buffer): boolean => standIns.has(decompressed);

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
 * The decompressed bytes kafkajs gets instead of `batch`'s: one record (message format v2 record layout: length,
 * attributes, timestamp delta, offset delta, key, value, headers) at offset delta `lastOffset - baseOffset`, null
 * key and value, and the {@link UNDECODABLE_HEADER} header; kafkajs's parser, patched, takes it alone
 * ({@link isStandInRecords}).
 * @returns undefined when the batch has no records (kafkajs then parses nothing).
 */
export function standInRecords(batch: UndecodableBatch): Buffer | undefined {
  if (batch.records <= 0) return undefined;
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
  standIns.add(one);
  return one;
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

/**
 * A partition paused on a condition its consumer waits out (an undecodable batch, a registry that does not answer),
 * as stats and /health report it. `since` is ms since epoch; the batch fields are set for UNDECODABLE_BATCH.
 */
export interface QuarantinedPartition {
  topic: string;
  partition: number;
  /** UNDECODABLE_BATCH, or the code of the retryable error that holds the partition (e.g. REGISTRY_UNAVAILABLE). */
  code: string;
  reason: string;
  since: number;
  /** Tries so far on this condition (1 on the first). */
  tries: number;
  /** ms until the next try. */
  retryInMs: number;
  codecId?: number;
  baseOffset?: string;
  lastOffset?: string;
}

/** Backoff between tries of a partition held by a retryable error, in ms: 1 s doubling up to 30 s. */
export const HOLD_BACKOFF = { initialMs: 1_000, maxMs: 30_000 } as const;

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
        'Partitions paused on a condition their consumer waits out, by reason (UNDECODABLE_BATCH, REGISTRY_UNAVAILABLE, ...; see /health degraded).',
        ['topic', 'partition', 'reason'],
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
 * The partitions of one consumer that are paused on a condition (see the module doc): an undecodable batch
 * ({@link add}) or a retryable error that holds the partition, such as a registry outage ({@link hold}). A paused
 * partition is resumed for its next try after a delay; the condition stays in /health (degraded) until the consumer
 * reports the partition read again ({@link ok}), so a failed try does not make it flap. The consumer also calls
 * {@link drop} when the partition is revoked and {@link close} when it stops.
 */
export class PartitionQuarantine {
  /**
   * Per partition: its report, what identifies the condition (code and the batch's base offset or the code), and
   * the timer of its next try while paused.
   */
  private readonly entries = new Map<
    string,
    { q: QuarantinedPartition; key: string; timer?: NodeJS.Timeout }
  >();
  private readonly metrics?: QuarantineMetrics;

  /**
   * @param o.component the name /health gives the consumer (e.g. `task consumer`)
   * @param o.retryMs ms until a partition paused on an undecodable batch is tried again (default
   *   {@link UNDECODABLE_RETRY_MS}); a held one backs off per {@link HOLD_BACKOFF}
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

  /** Pauses `topic`/`partition` at the undecodable `batch` and schedules its next try. */
  add(topic: string, partition: number, batch: UndecodableBatch): void {
    const retryMs = this.o.retryMs ?? UNDECODABLE_RETRY_MS;
    this.metrics?.batches.inc({ topic, partition: String(partition) });
    this.pause(topic, partition, {
      code: UNDECODABLE_CODE,
      key: batch.baseOffset,
      retryMs: () => retryMs,
      reason: batch.reason,
      batch: { codecId: batch.codecId, baseOffset: batch.baseOffset, lastOffset: batch.lastOffset },
      message:
        `${UNDECODABLE_CODE}: ${topic}:${partition} is paused at a record batch compressed with Kafka codec id ` +
        `${batch.codecId} (offsets ${batch.baseOffset}..${batch.lastOffset}) that cannot be decoded: ` +
        `${batch.reason}. Retried every ${retryMs} ms; other partitions flow`,
    });
  }

  /**
   * Pauses `topic`/`partition` because of a retryable error (nothing of the batch was applied) and schedules its
   * next try with backoff ({@link HOLD_BACKOFF}).
   */
  hold(topic: string, partition: number, err: Error & { code?: string }): void {
    const code = err.code ?? err.name;
    this.pause(topic, partition, {
      code,
      key: code,
      retryMs: (tries) => Math.min(HOLD_BACKOFF.maxMs, HOLD_BACKOFF.initialMs * 2 ** Math.min(tries - 1, 20)),
      reason: err.message,
      message: `${code}: ${topic}:${partition} is paused: ${err.message}. Retried with backoff; nothing is dead-lettered for it`,
    });
  }

  /** The consumer read (or applied) `topic`/`partition` again: its condition is over. */
  ok(topic: string, partition: number): void {
    const tp = `${topic}:${partition}`;
    const e = this.entries.get(tp);
    if (!e || e.timer) return; // none, or paused now (a try is still to come)
    this.release(tp);
    this.o.logger.info({ topic, partition, code: e.q.code, tries: e.q.tries }, 'partition read again');
  }

  /** Whether `topic`/`partition` is paused now (its consumer must keep it paused). */
  has(topic: string, partition: number): boolean {
    return this.entries.get(`${topic}:${partition}`)?.timer !== undefined;
  }

  /** Forgets a partition this consumer no longer owns (its new owner meets the condition itself). */
  drop(topic: string, partition: number): void {
    this.release(`${topic}:${partition}`);
  }

  /** The partitions paused or waiting to be read again. */
  list(): QuarantinedPartition[] {
    return [...this.entries.values()].map((e) => e.q);
  }

  close(): void {
    for (const tp of [...this.entries.keys()]) this.release(tp);
  }

  private pause(
    topic: string,
    partition: number,
    c: {
      code: string;
      key: string;
      retryMs: (tries: number) => number;
      reason: string;
      message: string;
      batch?: Pick<QuarantinedPartition, 'codecId' | 'baseOffset' | 'lastOffset'>;
    },
  ): void {
    const tp = `${topic}:${partition}`;
    const existing = this.entries.get(tp);
    if (existing?.timer) clearTimeout(existing.timer);
    const key = `${c.code}/${c.key}`;
    const same = existing !== undefined && existing.key === key;
    const tries = same ? existing.q.tries + 1 : 1;
    const retryInMs = c.retryMs(tries);
    const q: QuarantinedPartition = {
      topic,
      partition,
      code: c.code,
      reason: c.reason,
      since: same ? existing.q.since : Date.now(),
      tries,
      retryInMs,
      ...c.batch,
    };
    this.switch('pause', topic, partition);
    const timer = setTimeout(() => this.retry(tp), retryInMs);
    timer.unref();
    this.entries.set(tp, { q, key, timer });
    this.metrics?.quarantined.set({ topic, partition: String(partition), reason: c.code }, 1);
    this.o.health?.degrade(`${this.o.component}:${tp}`, { code: c.code, error: c.message });
    if (tries === 1) this.o.logger.error({ ...q }, c.message);
    else this.o.logger.warn({ topic, partition, code: c.code, tries, retryInMs }, 'partition still paused');
  }

  /**
   * Pauses or resumes through the consumer; never throws. kafkajs throws "Consumer group was not initialized"
   * between a consumer crash it restarts from (a broker gone) and the restart, and this runs from timers, where a
   * throw would end the process. The consumer's rejoin pauses its quarantined partitions again.
   */
  private switch(op: 'pause' | 'resume', topic: string, partition: number): void {
    try {
      this.o.partitions[op](topic, partition);
    } catch (err) {
      this.o.logger.warn(
        { err, topic, partition, op },
        'could not switch the partition now (consumer restarting)',
      );
    }
  }

  private retry(tp: string): void {
    const e = this.entries.get(tp);
    if (!e?.timer) return;
    e.timer = undefined;
    this.switch('resume', e.q.topic, e.q.partition);
  }

  private release(tp: string): void {
    const e = this.entries.get(tp);
    if (!e) return;
    if (e.timer) clearTimeout(e.timer);
    this.entries.delete(tp);
    this.metrics?.quarantined.remove({
      topic: e.q.topic,
      partition: String(e.q.partition),
      reason: e.q.code,
    });
    this.o.health?.recover(`${this.o.component}:${tp}`);
  }
}
