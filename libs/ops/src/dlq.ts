import { hostname } from 'node:os';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import { KeyflowError } from '@keyflow/errors';
import { DEFAULT_COMPLETION_TTL_MS } from '@keyflow/idempotency';
import { fenceExpiryMarginMs } from '@keyflow/workflow';
import {
  CompressionTypes,
  ConfigResourceTypes,
  type Admin,
  type IHeaders,
  type Kafka,
  type KafkaMessage,
  type Producer,
} from 'kafkajs';
import type { Logger } from '@keyflow/observability';
import type { ConsumedMessage } from './ordered-consumer';

import {
  ensureDlqLedger,
  handledEntryOf,
  ledgerMessage,
  readDlqLedger,
  type DlqAction,
  type LedgerCodec,
} from './dlq-ledger';
import { lastStableOffsets, scanRanges } from './scan';
import { catalogDlqSource, retryWhileTopicsSettle } from './topics';
import { isTooLarge, RECORD_TOO_LARGE } from './client';
import { messageBytes } from './batching-producer';
import { zstdCompress, zstdTakes } from './codecs';

/** Triage headers on every DLQ record (values are UTF-8 strings; times are ms since epoch). */
export const DLQ_HEADERS = {
  originalTopic: 'x-dlq-original-topic',
  originalPartition: 'x-dlq-original-partition',
  originalOffset: 'x-dlq-original-offset',
  errorClass: 'x-dlq-error-class',
  errorMessage: 'x-dlq-error-message',
  /** The error's machine-readable code, when it has one (e.g. INPUT_SCHEMA, DUPLICATE_COLUMN). */
  errorCode: 'x-dlq-error-code',
  attempts: 'x-dlq-attempts',
  firstFailureAt: 'x-dlq-first-failure-at',
  lastFailureAt: 'x-dlq-last-failure-at',
  consumerGroup: 'x-dlq-consumer-group',
  host: 'x-dlq-host',
  redriveCount: 'x-dlq-redrive-count',
  /**
   * On a stand-in DLQ record only: the original's value (and its own headers) could not be carried by any request
   * (see {@link sendToDlq}); says how many bytes it had. The original stays at its topic, partition and offset
   * (the headers above) until its retention ends. Such a record is never redriven.
   */
  omitted: 'x-dlq-omitted',
} as const;

const OURS = new Set<string>(Object.values(DLQ_HEADERS));

export interface DeadLetter {
  errorClass: string;
  errorMessage: string;
  /** The error's `code`, when it has one: written as x-dlq-error-code. */
  errorCode?: string | null;
  attempts: number;
  firstFailureAt: number;
  lastFailureAt: number;
  consumerGroup: string;
}

/** Ledger key and in-memory id of a DLQ record: `<physical dlq topic>/<partition>/<offset>`. */
export const dlqRecordId = (physicalDlqTopic: string, partition: number, offset: string) =>
  `${physicalDlqTopic}/${partition}/${offset}`;

/** `task.extract` -> `task.extract.dlq`. */
export const dlqTopicFor = (topic: string) => `${topic}.dlq`;

export function header(headers: IHeaders | undefined, name: string): string | undefined {
  const v = headers?.[name];
  if (v === undefined || v === null) return undefined;
  return Array.isArray(v) ? v.at(-1)?.toString() : v.toString();
}

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

const gzipped = promisify(gzip);

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
    compression === CompressionTypes.GZIP ? await gzipped(message.value) : await zstdCompress(message.value);
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
async function sendWithinLimit(
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

export interface RedriveFilter {
  /** Only the records of this DLQ partition. */
  partition?: number;
  /** Only the record at this offset (with `partition`: one record). */
  offset?: string;
  /** Only records with this key. */
  key?: string;
  /** Only records whose error class is this. */
  errorClass?: string;
  /** Only records whose last failure is at or after / before these times (ms since epoch). */
  fromMs?: number;
  toMs?: number;
}

export interface RedriveReport {
  scanned: number;
  /** Records re-published, or discarded with `action: 'DISCARDED'` (with `dryRun`: that would be). */
  moved: number;
  /** Moved records per original topic. */
  byTopic: Record<string, number>;
  /** Records that did not match the filter. */
  skipped: number;
  /** Matching pending records a redrive cannot send: no x-dlq-original-topic header (discard them instead). */
  noOriginalTopic: number;
  /** Matching records the ledger says were handled before (left alone unless `includeHandled`). */
  alreadyHandled: number;
  /**
   * Matching records their original topic refused as larger than its max.message.bytes, also compressed and without
   * the x-dlq-redrive-count header (a record at its topic's limit goes back without it): left pending (raise the
   * topic's limit, then redrive again), the redrive goes on with the next record.
   */
  tooLarge: number;
  /**
   * Matching stand-in records (header x-dlq-omitted: no request could carry the original, see sendToDlq): there is
   * nothing to send back, so a redrive leaves them pending (discard them once the original is dealt with).
   */
  omitted: number;
  /**
   * Matching pending records a redrive refused (left pending, see {@link RedriveRefusal}): one naming a topic other
   * than its DLQ's source, or one the caller's `admit` check refused (a task command of a run that ended).
   */
  refused: number;
  /** The refused records, each with its reason (the first {@link REPORT_RECORDS_MAX}). */
  refusals: RedriveRefusal[];
  /** The records re-published (with `dryRun`: that would be), each with its topic (the first {@link REPORT_RECORDS_MAX}). */
  redriven: Array<{ partition: number; offset: string; key: string | null; topic: string }>;
  dryRun: boolean;
  action: DlqAction;
}

/** A DLQ record a redrive left pending, and why. */
export interface RedriveRefusal {
  partition: number;
  offset: string;
  key: string | null;
  /** NOT_OWN_SOURCE (its x-dlq-original-topic is not its DLQ's source topic), or the `admit` check's code. */
  code: string;
  reason: string;
}

/**
 * A caller's check of one matching pending DLQ record before it is redriven: undefined to send it, or the refusal's
 * code and reason (the record is then left pending and reported). Runs in dry runs too.
 */
export type RedriveAdmit = (
  message: KafkaMessage,
  at: { partition: number; originalTopic: string },
) => Promise<{ code: string; reason: string } | undefined>;

/** Longest list of records a {@link RedriveReport} names (its counts cover them all). */
export const REPORT_RECORDS_MAX = 100;

/** Refusal code of a DLQ record that names a topic other than its DLQ's source. */
export const NOT_OWN_SOURCE = 'NOT_OWN_SOURCE';

/** Whether a DLQ record matches `filter` (by partition, offset, key, error class and last failure time). */
export function matchesRedriveFilter(
  m: Pick<KafkaMessage, 'key' | 'headers' | 'offset'>,
  filter: RedriveFilter,
  partition?: number,
): boolean {
  const h = m.headers ?? {};
  const last = Number(header(h, DLQ_HEADERS.lastFailureAt) ?? 0);
  return (
    (filter.partition === undefined || partition === filter.partition) &&
    (filter.offset === undefined || m.offset === filter.offset) &&
    (filter.key === undefined || m.key?.toString() === filter.key) &&
    (filter.errorClass === undefined || header(h, DLQ_HEADERS.errorClass) === filter.errorClass) &&
    (filter.fromMs === undefined || last >= filter.fromMs) &&
    (filter.toMs === undefined || last < filter.toMs)
  );
}

/**
 * Re-publishes the DLQ records that match `filter` to their original topic, with their original key, bytes
 * and headers (so the idempotency key inside the payload is kept), minus the triage headers, plus
 * `x-dlq-redrive-count`; with `action: 'DISCARDED'` sends nothing to the original topic. A record is redriven only to
 * its DLQ's own source topic (`<topic>` of `<topic>.dlq`) and only when `admit` (if given) lets it: others are left
 * pending and listed with their reason in the report's `refusals`. Each record acted on gets
 * a DlqRecordHandled entry in the DLQ ledger (libs/kafka dlq-ledger.ts) after its send, so it stops counting as
 * pending, and a later redrive leaves it alone unless `includeHandled`. Reads the DLQ (read_committed) from the
 * beginning up to its last stable offsets at the start of the call (`scanRanges`: transactional DLQs, such as the
 * orchestrator's wf.requests.dlq and task.results.dlq, hold markers and aborted records it passes over), at most
 * `ratePerSec` records per second, then returns. With `dryRun` nothing is sent: the report says what would be. A
 * crash between a record's send and its ledger entry leaves it pending: it may be redriven again, which the
 * idempotency layer makes safe.
 * @throws UndecodableBatchError (code UNDECODABLE_BATCH, naming the DLQ partition and offsets) when a record batch
 *   of the DLQ cannot be decompressed: nothing after it in that partition is moved; the codec's registry errors
 *   (ensureDlqLedger); whatever else the consumer or producer throws (kafkajs errors)
 */
export async function redrive(
  kafka: Kafka,
  opts: {
    dlqTopic: string;
    filter?: RedriveFilter;
    ratePerSec?: number;
    logger: Logger;
    producer: Producer;
    dryRun?: boolean;
    /** The ledger's codec and who acts (see {@link handledBy}). */
    ledger: { codec: LedgerCodec; handledBy: string; reason?: string };
    /** Default REDRIVEN. */
    action?: DlqAction;
    /** Also act on records the ledger says were handled before (default false). */
    includeHandled?: boolean;
    /** Act on at most this many records (the count an operator confirmed after a dry run); default no limit. */
    limit?: number;
    /** The caller's check of each record before it is redriven (see {@link RedriveAdmit}); default none. */
    admit?: RedriveAdmit;
  },
): Promise<RedriveReport> {
  const { dlqTopic, filter = {}, ratePerSec = 100, dryRun = false, action = 'REDRIVEN' } = opts;
  const { codec } = opts.ledger;
  if (!dryRun) await ensureDlqLedger(kafka, codec);
  const handled = await readDlqLedger(kafka, codec);
  const ends = await lastStableOffsets(kafka, dlqTopic);
  const report: RedriveReport = {
    scanned: 0,
    moved: 0,
    byTopic: {},
    skipped: 0,
    noOriginalTopic: 0,
    alreadyHandled: 0,
    tooLarge: 0,
    omitted: 0,
    refused: 0,
    refusals: [],
    redriven: [],
    dryRun,
    action,
  };
  const source = catalogDlqSource(dlqTopic);
  const refuse = (partition: number, message: KafkaMessage, code: string, reason: string) => {
    report.refused++;
    if (report.refusals.length < REPORT_RECORDS_MAX)
      report.refusals.push({
        partition,
        offset: message.offset,
        key: message.key?.toString() ?? null,
        code,
        reason,
      });
  };
  const minGapMs = 1_000 / ratePerSec;
  let nextSendAt = Date.now();
  await scanRanges(
    kafka,
    ends.map((e) => ({ topic: dlqTopic, partition: e.partition, from: e.low, to: e.end })),
    async (_topic, partition, message) => {
      report.scanned++;
      const h = message.headers ?? {};
      const original = header(h, DLQ_HEADERS.originalTopic);
      if (!matchesRedriveFilter(message, filter, partition)) {
        report.skipped++;
        return;
      }
      if (!opts.includeHandled && handledEntryOf(handled, dlqTopic, partition, message)) {
        report.alreadyHandled++;
        return;
      }
      if (!original && action === 'REDRIVEN') {
        report.noOriginalTopic++;
        return;
      }
      if (header(h, DLQ_HEADERS.omitted) !== undefined && action === 'REDRIVEN') {
        report.omitted++;
        return;
      }
      if (action === 'REDRIVEN') {
        // A DLQ holds the records of one topic: a header naming another (forged, or copied from elsewhere) would make
        // the redrive write where this DLQ's deployment has no say.
        if (original !== source) {
          refuse(
            partition,
            message,
            NOT_OWN_SOURCE,
            `its x-dlq-original-topic names ${original}, not ${source}: a redrive sends only to its DLQ's own source topic`,
          );
          return;
        }
        if (opts.limit !== undefined && report.moved >= opts.limit) return false;
        const refusal = await opts.admit?.(message, { partition, originalTopic: original });
        if (refusal) {
          refuse(partition, message, refusal.code, refusal.reason);
          return;
        }
      }
      if (opts.limit !== undefined && report.moved >= opts.limit) return false;
      if (!dryRun) {
        const wait = nextSendAt - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        nextSendAt = Math.max(Date.now(), nextSendAt) + minGapMs;
        if (action === 'REDRIVEN') {
          const kept: IHeaders = Object.fromEntries(Object.entries(h).filter(([k]) => !OURS.has(k)));
          kept[DLQ_HEADERS.redriveCount] = String(Number(header(h, DLQ_HEADERS.redriveCount) ?? 0) + 1);
          const back = { key: message.key, value: message.value, headers: kept };
          try {
            await sendWithinLimit(opts.producer, original!, back).catch(async (e: unknown) => {
              if (!isTooLarge(e)) throw e;
              // The record as its topic accepted it, without the redrive count that made it too large.
              const { [DLQ_HEADERS.redriveCount]: _count, ...asAccepted } = kept;
              await sendWithinLimit(opts.producer, original!, { ...back, headers: asAccepted });
            });
          } catch (e) {
            if (!isTooLarge(e)) throw e;
            report.tooLarge++;
            opts.logger.warn(
              { dlqTopic, partition, offset: message.offset, original, err: (e as Error).message },
              'DLQ record too large for its original topic, also compressed: left pending',
            );
            return;
          }
        }
        const { topic, ...entry } = ledgerMessage(codec, {
          dlqTopic,
          partition,
          offset: message.offset,
          recordTimestamp: Number(message.timestamp),
          action,
          originalTopic: action === 'REDRIVEN' ? original : null,
          handledBy: opts.ledger.handledBy,
          reason: opts.ledger.reason,
        });
        await opts.producer.send({ topic, acks: -1, messages: [entry] });
      }
      report.moved++;
      if (action === 'REDRIVEN' && report.redriven.length < REPORT_RECORDS_MAX)
        report.redriven.push({
          partition,
          offset: message.offset,
          key: message.key?.toString() ?? null,
          topic: original!,
        });
      const to = action === 'REDRIVEN' ? original! : '(discarded)';
      report.byTopic[to] = (report.byTopic[to] ?? 0) + 1;
    },
    { groupPrefix: 'keyflow-redrive' },
  );
  opts.logger.info({ dlqTopic, filter, ...report }, dryRun ? 'redrive dry run finished' : 'redrive finished');
  return report;
}
