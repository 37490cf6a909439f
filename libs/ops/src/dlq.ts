import { hostname } from 'node:os';
import { KeyflowError } from '@keyflow/errors';
import { DEFAULT_COMPLETION_TTL_MS } from '@keyflow/idempotency';
import { fenceExpiryMarginMs } from '@keyflow/workflow';
import {
  CompressionTypes,
  ConfigResourceTypes,
  gzipCompress,
  isTooLarge,
  messageBytes,
  RECORD_TOO_LARGE,
  retryWhileTopicsSettle,
  zstdCompress,
  zstdTakes,
  type Admin,
  type ConsumedMessage,
  type IHeaders,
  type Producer,
} from '@keyflow/kafka';
import type { Logger } from '@keyflow/observability';
import { DLQ_HEADERS, dlqTopicFor, header, OURS, type DeadLetter } from './dlq-headers';

/** Longest x-dlq-error-message, in UTF-8 bytes (a longer message is cut at a character boundary, with "…"). */
export const DLQ_ERROR_MESSAGE_MAX_BYTES = 2_000;
/** Longest x-dlq-error-class, x-dlq-error-code, x-dlq-consumer-group and x-dlq-host, in UTF-8 bytes. */
const DLQ_NAME_MAX_BYTES = 255;

/**
 * Bytes a DLQ topic's `max.message.bytes` exceeds twice its source topic's (see {@link dlqLimitBytes}): room for the
 * triage headers (bounded to about 3 KiB by {@link dlqMessage}) and the record batch's overhead.
 */
export const DLQ_HEADROOM_BYTES = 16 * 1024;

/**
 * The `max.message.bytes` a DLQ topic gets, in bytes: twice its source topic's limit plus {@link DLQ_HEADROOM_BYTES}.
 * A DLQ record is the original key, value and headers plus the triage headers, sent uncompressed or, when refused,
 * compressed (the worker: gzip, then zstd; the engine: the codec {@link fitDlqRecord} measures to fit). The broker's
 * limit applies to the (compressed) record batch (Kafka docs, topic config `max.message.bytes`). Every record its
 * source accepted uncompressed fits; one its producer compressed (zstd or lz4 from librdkafka or the Java client) fits
 * when gzip or zstd at level 3 brings it within twice the source's limit (gzip finds repeats only within 32 KiB, zstd
 * across megabytes). One that still does not fit (a producer's zstd at a higher level, or with a longer window, than
 * level 3 reaches; or a DLQ whose limit could not be
 * raised) goes to the DLQ as a stand-in without its value ({@link dlqStandIn}), so its partition goes on; the
 * original stays at its topic until its retention ends.
 */
export const dlqLimitBytes = (sourceMaxMessageBytes: number) =>
  2 * sourceMaxMessageBytes + DLQ_HEADROOM_BYTES;

/** The topic setting that bounds a record batch, in bytes (Kafka docs, topic config `max.message.bytes`). */
const MAX_MESSAGE_BYTES = 'max.message.bytes';

/** Topic settings that bound how long a record stays (Kafka docs, topic configs `retention.ms`, `segment.ms`). */
const RETENTION_MS = 'retention.ms';
const SEGMENT_MS = 'segment.ms';
/** Longest `segment.ms` of a DLQ, ms: one day. */
const DLQ_SEGMENT_MAX_MS = 24 * 3600_000;

/**
 * The `retention.ms` and `segment.ms` of a DLQ topic, in ms, for the workers' completion TTL
 * (WORKER_COMPLETION_TTL_MS): every DLQ record is deleted before the completion records and fences of its command
 * expire, so a redriven command finds its fence (a compensated step never runs again). Kafka deletes a segment once
 * its newest record is older than `retention.ms`, and a segment holds records for at most `segment.ms` before it
 * rolls (Kafka docs, topic configs), checked every `log.retention.check.interval.ms` (5 min by default): a record lives
 * at most `segment.ms + retention.ms` plus that check. Both together take the TTL less the margin of
 * `fenceExpiryMarginMs` (a tenth, at most an hour; libs/workflow): `segment.ms` half of it, at most a day, and
 * `retention.ms` the rest (7 days: 1 day and 5 days 23 hours). With a TTL under about an hour the 5-minute check may
 * keep a record past its fence: the tools' own check of a record's age applies (libs/workflow rerunVerdict).
 */
export function dlqRetention(completionTtlMs: number): { retentionMs: number; segmentMs: number } {
  const window = Math.max(2, Math.floor(completionTtlMs - fenceExpiryMarginMs(completionTtlMs)));
  const segmentMs = Math.max(1, Math.min(DLQ_SEGMENT_MAX_MS, Math.floor(window / 2)));
  return { retentionMs: window - segmentMs, segmentMs };
}

/**
 * The configs a DLQ topic is created with, for a source limit in bytes and the workers' completion TTL in ms (default
 * DEFAULT_COMPLETION_TTL_MS): `max.message.bytes` of {@link dlqLimitBytes}, `retention.ms` and `segment.ms` of
 * {@link dlqRetention}.
 */
export const dlqTopicConfigs = (
  sourceMaxMessageBytes: number,
  completionTtlMs: number = DEFAULT_COMPLETION_TTL_MS,
): Record<string, string> => {
  const { retentionMs, segmentMs } = dlqRetention(completionTtlMs);
  return {
    [MAX_MESSAGE_BYTES]: String(dlqLimitBytes(sourceMaxMessageBytes)),
    [RETENTION_MS]: String(retentionMs),
    [SEGMENT_MS]: String(segmentMs),
  };
};

/**
 * `s` cut to at most `maxBytes` bytes of UTF-8 at a code point boundary (never half a surrogate pair), with "…"
 * appended when cut (counted in the bound; left out when `maxBytes` < 3).
 */
export function truncateUtf8(s: string, maxBytes: number): string {
  if (Buffer.byteLength(s) <= maxBytes) return s;
  const mark = maxBytes >= 3 ? '…' : ''; // 3 bytes: left out under a bound it does not fit in
  const room = maxBytes - Buffer.byteLength(mark);
  let bytes = 0;
  let end = 0;
  for (const ch of s) {
    const n = Buffer.byteLength(ch);
    if (bytes + n > room) break;
    bytes += n;
    end += ch.length;
  }
  return `${s.slice(0, end)}${mark}`;
}

/**
 * The DLQ record for a message: original key and bytes, original headers (trace context, earlier redrive count) and
 * the triage headers. `host` names the process that gave up on it (default `<hostname>/<pid>`). The triage headers
 * are bounded (error message {@link DLQ_ERROR_MESSAGE_MAX_BYTES}, names 255 bytes), so a DLQ record exceeds its
 * original by at most about 3 KiB.
 */
export function dlqMessage(
  m: Pick<ConsumedMessage, 'topic' | 'partition' | 'offset' | 'key' | 'value' | 'headers'>,
  dl: DeadLetter,
  host = `${hostname()}/${process.pid}`,
): { key: Buffer | null; value: Buffer | null; headers: IHeaders } {
  // The original's own x-dlq-* headers are not kept (a producer's, or a stand-in's omitted, would be read as this
  // record's triage), but for the redrive count, which redrive increments, when it is a number.
  const kept: IHeaders = {};
  for (const [k, v] of Object.entries(m.headers ?? {}))
    if (!OURS.has(k) || (k === DLQ_HEADERS.redriveCount && isCount(header(m.headers, k)))) kept[k] = v;
  const headers: IHeaders = {
    ...kept,
    [DLQ_HEADERS.originalTopic]: m.topic,
    [DLQ_HEADERS.originalPartition]: String(m.partition),
    [DLQ_HEADERS.originalOffset]: m.offset,
    [DLQ_HEADERS.errorClass]: truncateUtf8(dl.errorClass, DLQ_NAME_MAX_BYTES),
    [DLQ_HEADERS.errorMessage]: truncateUtf8(dl.errorMessage, DLQ_ERROR_MESSAGE_MAX_BYTES),
    ...(dl.errorCode ? { [DLQ_HEADERS.errorCode]: truncateUtf8(dl.errorCode, DLQ_NAME_MAX_BYTES) } : {}),
    [DLQ_HEADERS.attempts]: String(dl.attempts),
    [DLQ_HEADERS.firstFailureAt]: String(dl.firstFailureAt),
    [DLQ_HEADERS.lastFailureAt]: String(dl.lastFailureAt),
    [DLQ_HEADERS.consumerGroup]: truncateUtf8(dl.consumerGroup, DLQ_NAME_MAX_BYTES),
    [DLQ_HEADERS.host]: truncateUtf8(host, DLQ_NAME_MAX_BYTES),
  };
  return { key: m.key, value: m.value, headers };
}

/**
 * Publishes the original bytes and key to `<topic>.dlq` with triage headers (see {@link dlqMessage}), uncompressed,
 * or compressed when the DLQ refuses it as too large (see {@link sendWithinLimit}); a record no codec carries goes as
 * a stand-in ({@link dlqStandIn}: no value, header {@link DLQ_HEADERS.omitted}), never retried for ever (the DLQ's own limit is
 * raised by {@link alignDlqLimits}). acks=all: it returns only once the DLQ record is durable, so the caller may then
 * commit past the original.
 */
export async function sendToDlq(producer: Producer, m: ConsumedMessage, dl: DeadLetter): Promise<void> {
  const topic = dlqTopicFor(m.topic);
  const record = dlqMessage(m, dl);
  try {
    await sendWithinLimit(producer, topic, record);
  } catch (e) {
    if (!(e instanceof RecordTooLargeError)) throw e;
    // No codec carries the original: the DLQ gets a stand-in that says so and where the original is, so that its
    // partition goes on and the operator learns of it (its value is lost once its topic's retention ends).
    const standIn = dlqStandIn(record, e);
    await producer
      .send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages: [standIn] })
      .catch(async (refused: unknown) => {
        if (!isTooLarge(refused)) throw refused;
        // A DLQ whose limit is tiny (it could not be raised: see alignDlqLimits) refuses even that.
        const note = `the DLQ refused even a stand-in: raise ${topic}'s max.message.bytes`;
        await producer.send({ topic, acks: -1, messages: [minimalDlqStandIn(record, note)] });
      });
  }
}

/**
 * Kafka's default broker `socket.request.max.bytes`, in bytes (Kafka docs, broker configs): a broker closes the
 * connection of a larger request instead of answering it, which kafkajs reports as a closed connection (EPIPE), not as
 * MESSAGE_TOO_LARGE, and retries for ever. A record that came compressed by its producer may be larger than this once
 * decompressed (a few hundred KB of zstd can hold gigabytes of repeats).
 */
export const SOCKET_REQUEST_MAX_BYTES = 104_857_600;

/**
 * Largest record ({@link messageBytes}, after compression) keyflow puts in a request that the broker has not refused
 * yet, in bytes: {@link SOCKET_REQUEST_MAX_BYTES} less 1 MiB for the request's other parts. Larger ones are measured
 * compressed first and go only in a codec that brings them under this.
 */
export const REQUEST_RECORD_MAX_BYTES = SOCKET_REQUEST_MAX_BYTES - 1024 * 1024;

/**
 * No codec brings a record under its topic's limit (the broker refused each one as too large) or under
 * {@link REQUEST_RECORD_MAX_BYTES}. Not retryable: the same record fails the same way. {@link isTooLarge} is true of it.
 */
export class RecordTooLargeError extends KeyflowError {
  readonly code = RECORD_TOO_LARGE;
  readonly retryable = false;
  /**
   * @param bytes the record's size uncompressed ({@link messageBytes}).
   * @param cause the broker's last refusal, if one was asked.
   */
  constructor(
    readonly topic: string,
    readonly bytes: number,
    cause?: unknown,
  ) {
    super(
      `a record of ${bytes} bytes fits no request to ${topic} in any codec tried here (none, gzip, zstd)` +
        (cause ? ` (last refusal: ${(cause as Error).message})` : ''),
      { cause },
    );
  }
}

/**
 * The bytes `message` adds to a request once its value is compressed with `compression` (measured here: key and
 * headers counted uncompressed, so at least what the broker will see). Infinity when zstd cannot compress it here.
 * @throws ZstdCompressionError (not retryable) when this Node has no zstd in node:zlib.
 */
async function compressedBytes(
  message: { key: Buffer | null; value: Buffer | null; headers: IHeaders },
  compression: CompressionTypes,
): Promise<number> {
  const bytes = messageBytes(message);
  if (compression === CompressionTypes.None || !message.value) return bytes;
  // zstdTakes leaves out zstd where this Node has none.
  if (compression === CompressionTypes.ZSTD && !zstdTakes(bytes)) return Infinity;
  const value =
    compression === CompressionTypes.GZIP
      ? await gzipCompress(message.value)
      : await zstdCompress(message.value);
  return messageBytes({ ...message, value });
}

/**
 * The codec that carries a DLQ record under `limitBytes` (after compression) and under {@link REQUEST_RECORD_MAX_BYTES},
 * measured here, for a sender that cannot let the broker refuse one codec after another (in a transaction a refused
 * send aborts it): gzip when the record fits as it is or gzipped, else zstd when that fits, else its stand-in
 * ({@link dlqStandIn}) gzipped. Only records over half the limit are compressed here to be measured.
 * @param topic the DLQ topic (named in the stand-in's reason).
 * @throws ZstdCompressionError (not retryable) when this Node has no zstd in node:zlib.
 */
export async function fitDlqRecord<M extends { key: Buffer | null; value: Buffer | null; headers: IHeaders }>(
  record: M,
  topic: string,
  limitBytes: number,
): Promise<{ record: M | ReturnType<typeof dlqStandIn>; compression: CompressionTypes }> {
  const limit = Math.min(limitBytes, REQUEST_RECORD_MAX_BYTES);
  const bytes = messageBytes(record);
  // gzip may make incompressible bytes a little larger (RFC 1952 framing, stored blocks): measured unless far under.
  if (bytes <= limit / 2 || (await compressedBytes(record, CompressionTypes.GZIP)) <= limit)
    return { record, compression: CompressionTypes.GZIP };
  if ((await compressedBytes(record, CompressionTypes.ZSTD)) <= limit)
    return { record, compression: CompressionTypes.ZSTD };
  const standIn = dlqStandIn(record, new RecordTooLargeError(topic, bytes));
  return {
    record:
      messageBytes(standIn) <= limit
        ? standIn
        : minimalDlqStandIn(record, `no codec fits ${topic}'s limit of ${limitBytes} bytes`),
    compression: CompressionTypes.GZIP,
  };
}

/** Whether a redrive count header's value is one (digits, at most 9). */
const isCount = (v: string | undefined): boolean => v !== undefined && /^\d{1,9}$/.test(v);

/**
 * The smallest stand-in: no key, the original's topic, partition and offset, the error class and a short
 * x-dlq-omitted (well under 2 KiB). For a DLQ whose limit is too small even for {@link dlqStandIn}'s.
 */
export function minimalDlqStandIn(
  record: { key: Buffer | null; value: Buffer | null; headers: IHeaders },
  limitNote: string,
): { key: null; value: null; headers: IHeaders } {
  const headers = boundedTriage(record.headers, [
    DLQ_HEADERS.originalTopic,
    DLQ_HEADERS.originalPartition,
    DLQ_HEADERS.originalOffset,
    DLQ_HEADERS.errorClass,
  ]);
  headers[DLQ_HEADERS.omitted] = truncateUtf8(
    `value of ${record.value?.length ?? 0} bytes, key and headers left out: ${limitNote}`,
    DLQ_NAME_MAX_BYTES,
  );
  return { key: null, value: null, headers };
}

/**
 * The triage headers `names` of `from`, each its last value cut to its bound (the error message to
 * {@link DLQ_ERROR_MESSAGE_MAX_BYTES}, the others to 255 bytes), a redrive count only when it is a number.
 */
function boundedTriage(from: IHeaders, names: Iterable<string>): IHeaders {
  const headers: IHeaders = {};
  for (const name of names) {
    const v = header(from, name);
    if (v === undefined || (name === DLQ_HEADERS.redriveCount && !isCount(v))) continue;
    headers[name] = truncateUtf8(
      v,
      name === DLQ_HEADERS.errorMessage ? DLQ_ERROR_MESSAGE_MAX_BYTES : DLQ_NAME_MAX_BYTES,
    );
  }
  return headers;
}

/** Longest key a stand-in DLQ record keeps, in bytes (a longer one is dropped with the value). */
const STAND_IN_KEY_MAX_BYTES = 16 * 1024;

/**
 * The stand-in for a DLQ record no request can carry: its key (when at most 16 KiB), no value, and only the triage
 * headers, rebuilt from their last values and each cut to its bound (the error message to
 * {@link DLQ_ERROR_MESSAGE_MAX_BYTES}, the others to 255 bytes; a redrive count only when it is a number), plus
 * {@link DLQ_HEADERS.omitted} naming what was left out and why: at most about 24 KiB whatever the original carried.
 */
export function dlqStandIn(
  record: { key: Buffer | null; value: Buffer | null; headers: IHeaders },
  why: RecordTooLargeError,
): { key: Buffer | null; value: null; headers: IHeaders } {
  const headers = boundedTriage(record.headers, OURS);
  const valueBytes = record.value?.length ?? 0;
  headers[DLQ_HEADERS.omitted] = truncateUtf8(
    `value of ${valueBytes} bytes and the original headers left out: ${why.message}`,
    DLQ_ERROR_MESSAGE_MAX_BYTES,
  );
  const key = record.key && record.key.length <= STAND_IN_KEY_MAX_BYTES ? record.key : null;
  return { key, value: null, headers };
}

/**
 * Sends one record (acks=all) uncompressed; when the broker refuses it as larger than the topic's limit, gzip-
 * compressed; when refused again, zstd-compressed. A record that came compressed by its producer may exceed the limit
 * uncompressed, incompressible bytes near the limit grow under gzip, and repeats further apart than gzip's 32 KiB
 * window (RFC 1951) shrink only under zstd. A record over {@link REQUEST_RECORD_MAX_BYTES} skips the codecs that do not
 * bring it under that (measured here). Used for DLQ records and for redriven ones.
 * @throws RecordTooLargeError (not retryable; its cause the broker's last refusal, a KafkaJSProtocolError of type
 *   MESSAGE_TOO_LARGE or RECORD_LIST_TOO_LARGE, if one was asked) when no codec fits; ZstdCompressionError
 *   (not retryable) when this Node has no zstd in node:zlib; any other error of the send (kafkajs errors).
 */
export async function sendWithinLimit(
  producer: Producer,
  topic: string,
  message: { key: Buffer | null; value: Buffer | null; headers: IHeaders },
): Promise<void> {
  const bytes = messageBytes(message);
  let refusal: unknown;
  for (const compression of [CompressionTypes.None, CompressionTypes.GZIP, CompressionTypes.ZSTD]) {
    // A request over the broker's socket limit is not refused but cut off (see SOCKET_REQUEST_MAX_BYTES): such a
    // record goes only in a codec measured to bring it under. zstd only when this process can make it (a refusal
    // inside kafkajs's send would not be retryable, and would count as a failed producer).
    if (compression === CompressionTypes.ZSTD && !zstdTakes(bytes)) continue;
    if (
      bytes > REQUEST_RECORD_MAX_BYTES &&
      (await compressedBytes(message, compression)) > REQUEST_RECORD_MAX_BYTES
    )
      continue;
    try {
      await producer.send({ topic, acks: -1, compression, messages: [message] });
      return;
    } catch (e) {
      if (!isTooLarge(e)) throw e;
      refusal = e;
    }
  }
  throw new RecordTooLargeError(topic, bytes, refusal);
}

/** kafkajs's ConfigSource for a topic's own (dynamic) setting (DescribeConfigs, KIP-226). */
const TOPIC_CONFIG_SOURCE = 1;

/**
 * Raises each DLQ topic's `max.message.bytes` to {@link dlqLimitBytes} of its source topic's effective limit, where
 * it is lower (a DLQ created by this version, an older one, an operator or a test harness), so a record its source
 * accepted is never refused as a DLQ record (which would retry its partition forever). Reads both topics' settings
 * (DescribeConfigs) and writes the DLQ's own settings back with the new limit (AlterConfigs replaces a topic's whole
 * set: its other own settings are kept; a change an operator makes between the two reads is overwritten). Returns
 * what it changed. Never throws: settings it cannot read (no DESCRIBE_CONFIGS permission, after the metadata retries
 * of {@link retryWhileTopicsSettle}) or change (no ALTER_CONFIGS) are logged as warnings naming the setting to make,
 * and the service runs on. New DLQ topics are created with the limit already (see {@link dlqLimitBytes}).
 * @param pairs source topic and its DLQ, physical names.
 */
export async function alignDlqLimits(
  admin: Admin,
  pairs: Array<{ source: string; dlq: string }>,
  logger: Logger,
  /**
   * The workers' completion TTL, ms: a DLQ whose `retention.ms` or `segment.ms` (its own or the broker's default)
   * exceeds {@link dlqRetention}'s is lowered to it in the same change, so its records never outlive the fences.
   */
  completionTtlMs?: number,
): Promise<Array<{ dlq: string; from: number; to: number; settings?: Record<string, string> }>> {
  if (pairs.length === 0) return [];
  const names = [...new Set(pairs.flatMap((p) => [p.source, p.dlq]))];
  let described: Awaited<ReturnType<Admin['describeConfigs']>>;
  try {
    // A broker whose metadata lags the topics' creation answers UNKNOWN_TOPIC_OR_PARTITION for a while.
    described = await retryWhileTopicsSettle(() =>
      admin.describeConfigs({
        includeSynonyms: false,
        resources: names.map((name) => ({ type: ConfigResourceTypes.TOPIC, name })),
      }),
    );
  } catch (err) {
    logger.warn(
      { err, topics: names },
      "cannot read the DLQ topics' settings (DescribeConfigs): their max.message.bytes is left as it is",
    );
    return [];
  }
  const settings = new Map(described.resources.map((r) => [r.resourceName, r.configEntries]));
  const limitOf = (topic: string) =>
    Number(settings.get(topic)?.find((e) => e.configName === MAX_MESSAGE_BYTES)?.configValue);
  const numberOf = (topic: string, name: string) =>
    Number(settings.get(topic)?.find((e) => e.configName === name)?.configValue);
  const retention = completionTtlMs === undefined ? undefined : dlqRetention(completionTtlMs);
  const changed: Array<{ dlq: string; from: number; to: number; settings?: Record<string, string> }> = [];
  for (const { source, dlq } of pairs) {
    const [have, sourceLimit] = [limitOf(dlq), limitOf(source)];
    if (!Number.isFinite(have) || !Number.isFinite(sourceLimit)) continue;
    const want = dlqLimitBytes(sourceLimit);
    const lower: Record<string, string> = {};
    if (retention) {
      // -1 (no time limit) or more than wanted: lowered.
      for (const [name, wanted] of [
        [RETENTION_MS, retention.retentionMs],
        [SEGMENT_MS, retention.segmentMs],
      ] as const) {
        const v = numberOf(dlq, name);
        if (Number.isFinite(v) && (v < 0 || v > wanted)) lower[name] = String(wanted);
      }
    }
    if (have >= want && Object.keys(lower).length === 0) continue;
    const next = { ...(have < want ? { [MAX_MESSAGE_BYTES]: String(want) } : {}), ...lower };
    const own = (settings.get(dlq) ?? [])
      .filter((e) => e.configSource === TOPIC_CONFIG_SOURCE && !(e.configName in next))
      .map((e) => ({ name: e.configName, value: e.configValue }));
    try {
      await admin.alterConfigs({
        validateOnly: false,
        resources: [
          {
            type: ConfigResourceTypes.TOPIC,
            name: dlq,
            configEntries: [...own, ...Object.entries(next).map(([name, value]) => ({ name, value }))],
          },
        ],
      });
      changed.push({ dlq, from: have, to: Math.max(have, want), settings: next });
      logger.info(
        { dlq, source, from: have, settings: next },
        'DLQ topic settings aligned with its source and the completion TTL',
      );
    } catch (err) {
      logger.warn(
        { err, dlq, source, have, want, settings: next },
        `cannot set ${dlq}'s ${Object.keys(next).join(', ')}: a record near ${source}'s limit may reach the DLQ only as a stand-in without its value, or a DLQ record may outlive its fences (the tools then check its age); set them on the topic`,
      );
    }
  }
  return changed;
}
