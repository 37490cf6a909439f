/**
 * Compression codecs for kafkajs, registered once for the whole process (this module is imported for its effect by
 * ./client, so every Kafka client made with createKafka can read and write them).
 *
 * kafkajs 2.2.4 ships only gzip; a record batch compressed with anything else makes its fetch throw
 * KafkaJSNotImplemented ("Snappy compression not implemented") and the consumer crashes. Java, Go (franz-go, sarama)
 * and librdkafka producers with `compression.type` set write such batches, so a consumer must read all of them.
 *
 * The codec id is the low three bits of a record batch's `attributes` (Kafka protocol, message format v2; the same
 * ids in the v0/v1 message attributes): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (KIP-110, Kafka 2.1). Ids 5-7 are
 * not defined; kafkajs then decodes the batch as uncompressed, which fails (see UndecodableBatchError).
 *
 * - 2 snappy: `kafkajs-snappy` (snappyjs, pure JS). Reads raw snappy (librdkafka, Go) and the xerial block framing
 *   (snappy-java, the Java client); writes raw snappy, which every client reads.
 * - 3 lz4: `lz4-napi` (the Rust lz4_flex crate behind N-API, via napi-rs; its binary ships inside a per-platform npm package, nothing is
 *   downloaded at install). Kafka's lz4 is the LZ4 frame format (magic 0x184D2204), read and written with
 *   decompressFrame/compressFrame. The KAFKA-3160 header-checksum bug concerns magic v0/v1 only; kafkajs writes v2.
 *
 * Checked against other clients (Kafka 4.1.1 broker): batches written by librdkafka (kcat, tests) and by the Java
 * client 4.1.1 (ConsoleProducer --compression-codec gzip|snappy|lz4|zstd; snappy-java's xerial framing) are read;
 * snappy and lz4 batches written by kafkajs with these codecs are accepted by the broker (which decompresses to
 * validate) and read by kcat and the Java ConsoleConsumer.
 * - 4 zstd: node:zlib's zstd (libzstd inside Node, >= 22.15, every line `engines` allows) reads and writes it, at
 *   level 3, zstd's default and the Java client's and librdkafka's; the frames written declare their content size.
 *
 * A batch that still cannot be decoded (codec id 5-7, or compressed bytes the codec rejects) must not fail the fetch:
 * kafkajs 2.2.4 decompresses inside its fetch-response parser, which knows no topic or partition, so a throw there
 * fails every partition led by that broker, on every refetch (a plain Error is retried and then restarted for ever,
 * measured: CRASH restart=true after 24 s, then every ~31 s; a KafkaJSNotImplemented stops the consumer for good).
 * The guarded codecs return a stand-in for the batch instead (./undecodable: records that carry a marker header
 * naming the codec, offsets and reason), and each consumer quarantines just that partition: paused, named in /health
 * and the metrics, retried periodically, nothing skipped. Only when the batch header cannot be read around the
 * compressed bytes (kafkajs did not hand a view of the fetch response) does the codec throw UndecodableBatchError.
 */
import * as zlib from 'node:zlib';
import { promisify } from 'node:util';
import { constants } from 'node:buffer';
import { CompressionCodecs, CompressionTypes, KafkaJSNotImplemented } from 'kafkajs';
import { KeyflowError } from '@keyflow/errors';
import { UNDECODABLE_CODE, isStandInRecords, standInRecords } from '../consumer/undecodable';
import {
  OutputLimitError,
  PARSED_RECORD_BYTES,
  XERIAL_HEADER,
  decompressionLimitOrDefault,
  maxDecompressedBytes,
  overDecompressionLimit,
  overLimitReason,
  xerialChunks,
} from './decompression-limit';
import { compressFrame as lz4CompressFrame, decompressFrame as lz4DecompressFrame } from 'lz4-napi';
// kafkajs-snappy has no type declarations: a factory returning kafkajs's codec shape.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const snappyCodec = require('kafkajs-snappy') as () => KafkaCodec;

/**
 * kafkajs's codec shape: `compress` gets kafkajs's Encoder (its bytes are `encoder.buffer`). kafkajs calls
 * `decompress` with the bytes only; {@link guardedCodec} also passes the decompression limit (bytes), which a codec
 * that can stop while it inflates (gzip) honours.
 */
export interface KafkaCodec {
  compress(encoder: { buffer: Buffer }): Promise<Buffer>;
  decompress(buffer: Buffer, limitBytes?: number): Promise<Buffer>;
}

/** Kafka's codec ids (record batch attributes & 0x07), by the name `compression.type` uses. */
export const KAFKA_CODEC_IDS = { none: 0, gzip: 1, snappy: 2, lz4: 3, zstd: 4 } as const;
export type KafkaCodecName = keyof typeof KAFKA_CODEC_IDS;

/** Record batch v2 header bytes before the records (KIP-98 layout): base offset ... records count. */
const BATCH_HEADER_BYTES = 61;
const MAGIC_V2 = 2;
const CODEC_MASK = 0x07;

/**
 * A compressed record batch that cannot be decoded: an unknown codec id (5-7), or bytes its codec rejects
 * (corrupt, truncated, or a framing this codec does not read). Not retryable: refetching returns the same bytes.
 * kafkajs's runner bails on its name (KafkaJSNotImplemented) and does not restart the consumer; see the module doc.
 * `batch` is read from the bytes before the records when kafkajs hands a view of the fetch response (it does in
 * 2.2.4); the topic and partition are unknown at this layer.
 */
export class UndecodableBatchError extends KafkaJSNotImplemented {
  readonly code = UNDECODABLE_CODE;
  readonly retryable = false;
  /**
   * @param where the topic and partition, when a reader of a stand-in record (./undecodable) raises it; the codec
   *   itself does not know them.
   */
  constructor(
    readonly codecId: number,
    readonly batch: { baseOffset: string; lastOffset: string; records: number } | undefined,
    readonly reason: string,
    readonly where?: { topic: string; partition: number },
  ) {
    // kafkajs's typings declare no constructor arguments; at runtime it takes (message) like every KafkaJSError.
    super(
      ...([
        `${UNDECODABLE_CODE}: a record batch ${where ? `on ${where.topic}:${where.partition} ` : ''}compressed with Kafka codec id ${codecId} ` +
          `${batch ? `(offsets ${batch.baseOffset}..${batch.lastOffset}, ${batch.records} records) ` : ''}` +
          `cannot be decoded: ${reason}. Not retryable: fix the reader's codecs, or skip the batch by committing ` +
          `past it`,
      ] as unknown as []),
    );
  }
}

/** The error a one-shot reader (redrive, rebuild) raises on a stand-in record of `topic`/`partition`. */
export function undecodableBatchError(
  topic: string,
  partition: number,
  b: { codecId: number; baseOffset: string; lastOffset: string; reason: string },
): UndecodableBatchError {
  const records = Number(BigInt(b.lastOffset) - BigInt(b.baseOffset)) + 1;
  return new UndecodableBatchError(
    b.codecId,
    { baseOffset: b.baseOffset, lastOffset: b.lastOffset, records },
    b.reason,
    { topic, partition },
  );
}

/** The batch header around `compressed`, when `compressed` is a view into kafkajs's fetch response buffer. */
function batchAround(compressed: Buffer, codecId: number): UndecodableBatchError['batch'] {
  const start = compressed.byteOffset - BATCH_HEADER_BYTES;
  if (start < 0) return undefined;
  const h = Buffer.from(compressed.buffer, start, BATCH_HEADER_BYTES);
  const batchLength = h.readInt32BE(8);
  const consistent =
    h.readInt8(16) === MAGIC_V2 &&
    (h.readInt16BE(21) & CODEC_MASK) === codecId &&
    batchLength === BATCH_HEADER_BYTES - 12 + compressed.length;
  if (!consistent) return undefined;
  const base = h.readBigInt64BE(0);
  return {
    baseOffset: base.toString(),
    lastOffset: (base + BigInt(h.readInt32BE(23))).toString(),
    records: h.readInt32BE(57),
  };
}

/** The stand-in records for an undecodable batch (see ./undecodable), or UndecodableBatchError when its header is unknown. */
function standInOrThrow(codecId: number, compressed: Buffer, reason: string): Buffer {
  const batch = batchAround(compressed, codecId);
  const standIn = batch && standInRecords({ codecId, ...batch, reason });
  if (!standIn) throw new UndecodableBatchError(codecId, batch, reason);
  return standIn;
}

/**
 * Wraps a codec factory so a decompression failure yields stand-in records naming the codec id (Kafka's, 1-7), the
 * batch and the reason (see ./undecodable), never a failed fetch. Every codec registerCompressionCodecs installs is
 * wrapped so. A batch that would decompress past KEYFLOW_MAX_DECOMPRESSED_BYTES (./decompression-limit), its parsed
 * records' objects counted, is such a failure: refused before decoding by what its framing says (zstd, LZ4,
 * snappy; framing that cannot be followed too), by the codec while it inflates (gzip), and in any case by the length
 * of what the codec returns.
 */
export function guardedCodec(codecId: number, codec: () => KafkaCodec): () => KafkaCodec {
  return () => {
    const c = codec();
    return {
      compress: (encoder) => c.compress(encoder),
      decompress: async (buffer) => {
        let reason: string;
        try {
          // What kafkajs's parsed records cost besides their bytes counts against the limit too.
          const records = batchAround(buffer, codecId)?.records ?? 0;
          const limit = decompressionLimitOrDefault();
          const room = limit - records * PARSED_RECORD_BYTES;
          if (room < 0)
            return standInOrThrow(
              codecId,
              buffer,
              overLimitReason(
                `${records} records parse to more than ${records * PARSED_RECORD_BYTES} bytes`,
                limit,
              ),
            );
          const over = overDecompressionLimit(codecId, buffer, room, limit);
          if (over) return standInOrThrow(codecId, buffer, over);
          const out = await c.decompress(buffer, room);
          if (out.length <= room) return out;
          reason = overLimitReason(`decompressed to ${out.length} bytes for ${records} records`, limit);
        } catch (err) {
          if (err instanceof UndecodableBatchError) throw err;
          reason =
            err instanceof OutputLimitError
              ? overLimitReason(err.message, decompressionLimitOrDefault())
              : (err as Error).message;
        }
        return standInOrThrow(codecId, buffer, reason);
      },
    };
  };
}

/** Codec ids 5-7 are not defined by Kafka: without this, kafkajs would parse the compressed bytes as records. */
const undefinedCodec = (codecId: number) => (): KafkaCodec => ({
  compress: () => Promise.reject(new Error(`Kafka defines no compression codec ${codecId}`)),
  decompress: async (buffer) => standInOrThrow(codecId, buffer, 'Kafka defines no such codec'),
});

type ZstdOptions = { params?: Record<number, number>; pledgedSrcSize?: number; maxOutputLength?: number };
type ZstdCall = (buf: Buffer, opts: ZstdOptions, cb: (err: Error | null, out: Buffer) => void) => void;
const nodeZstd = zlib as unknown as { zstdCompress?: ZstdCall; zstdDecompress?: ZstdCall };
/** node:zlib's ZSTD_c_compressionLevel parameter id (zstd's ZSTD_cParameter 100). */
const ZSTD_C_COMPRESSION_LEVEL =
  (zlib.constants as unknown as { ZSTD_c_compressionLevel?: number }).ZSTD_c_compressionLevel ?? 100;

/** zstd's default compression level (the zstd CLI's, librdkafka's and the Java client's default for Kafka). */
const ZSTD_LEVEL = 3;

/**
 * Whether node:zlib has zstd here (Node >= 22.15 / 23.8, so every line package.json's `engines` allows); without it
 * zstd is neither written nor read (ZstdCompressionError, and batches become undecodable stand-ins).
 */
export const NODE_HAS_ZSTD = nodeZstd.zstdCompress !== undefined && nodeZstd.zstdDecompress !== undefined;

const NO_ZSTD = `this Node (${process.version}) has no zstd in node:zlib: keyflow needs Node >= 22.15`;

/**
 * zstd cannot be compressed here: this Node has no zstd in node:zlib (older than 22.15, outside package.json's
 * `engines`). Not retryable: the same process never has it.
 */
export class ZstdCompressionError extends KeyflowError {
  readonly code = 'ZSTD_COMPRESSION_FAILED';
  constructor(
    message: string,
    readonly retryable: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** node:zlib's zstd `fn` as a promise. */
const zstdCall = (fn: ZstdCall, buf: Buffer, opts: ZstdOptions): Promise<Buffer> =>
  new Promise((resolve, reject) => fn(buf, opts, (err, out) => (err ? reject(err) : resolve(out))));

/**
 * `buf` as one zstd frame at level 3 (node:zlib's libzstd, off the event loop) that declares its content size
 * (`pledgedSrcSize`): a reader then needs only that many bytes, not a window. Without it node:zlib's streaming
 * compressor (Node 22 and 24) writes no content size and a 2 MiB window descriptor, which a reader must reserve: a
 * batch of 900 KB was refused under a 1 MiB KEYFLOW_MAX_DECOMPRESSED_BYTES.
 * @throws ZstdCompressionError (not retryable) when this Node has no zstd in node:zlib.
 */
export async function zstdCompress(buf: Buffer): Promise<Buffer> {
  if (!nodeZstd.zstdCompress)
    throw new ZstdCompressionError(`zstd compression unavailable: ${NO_ZSTD}`, false);
  return zstdCall(nodeZstd.zstdCompress, buf, {
    pledgedSrcSize: buf.length,
    params: { [ZSTD_C_COMPRESSION_LEVEL]: ZSTD_LEVEL },
  });
}

/**
 * zstd frames decompressed by node:zlib's libzstd (off the event loop), stopping at `limitBytes` (zlib's
 * `maxOutputLength`) as gzip does. libzstd refuses a frame whose window is over 128 MiB (its default windowLogMax 27)
 * and one whose blocks do not make the content size it declares.
 * @throws OutputLimitError past `limitBytes`; Error when this Node has no zstd or libzstd rejects the bytes.
 */
export async function zstdDecompress(buf: Buffer, limitBytes: number): Promise<Buffer> {
  if (!nodeZstd.zstdDecompress) throw new Error(NO_ZSTD);
  try {
    return await zstdCall(nodeZstd.zstdDecompress, buf, {
      maxOutputLength: Math.min(limitBytes, MAX_BUFFER_BYTES),
    });
  } catch (e) {
    if ((e as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE')
      throw new OutputLimitError(`zstd decompresses past ${limitBytes} bytes`, { cause: e });
    throw e;
  }
}

/** Whether zstd compression here takes `bytes` of records: whenever node:zlib has zstd (no bound on the input). */
export const zstdTakes = (_bytes: number): boolean => NODE_HAS_ZSTD;

/** The largest Buffer this Node makes (zlib refuses a greater `maxOutputLength`), in bytes. */
const MAX_BUFFER_BYTES = constants.MAX_LENGTH;
const gzip = promisify(zlib.gzip);
const unzip = promisify(zlib.unzip) as (buf: Buffer, opts: zlib.ZlibOptions) => Promise<Buffer>;

/**
 * The deflate level keyflow writes gzip at: 1 (zlib's Z_BEST_SPEED). On the engine's own record batches (2.8 MB of
 * them from a run of bench:peers, 2026-12-06) it took 0.6 of level 6's CPU (zlib's and kafkajs's default) for 9 %
 * more bytes (7.6:1 against 8.4:1). Any gzip reader reads any level; the Java client's `compression.gzip.level`
 * (KIP-390) is the same knob.
 */
export const GZIP_LEVEL = zlib.constants.Z_BEST_SPEED;

/**
 * zlib's output chunk for an input of `bytes`: a quarter of it, within 16 KiB (zlib's default) and 1 MiB. Each
 * chunk is one round trip between libuv's pool and the event loop; these batches shrink 7-8 times, so most take one.
 */
const gzipChunkBytes = (bytes: number) => Math.min(Math.max(16 * 1024, bytes >>> 2), 1024 * 1024);

/**
 * `buf` gzipped as keyflow's producers write gzip (node:zlib at {@link GZIP_LEVEL}, off the event loop): what a
 * measure of a record's gzipped size uses, so it is taken at the level and settings its batch is written with (an
 * estimate of that batch: the batch gzips whole records, keys and headers with the value).
 */
export const gzipCompress = (buf: Buffer): Promise<Buffer> =>
  gzip(buf, { level: GZIP_LEVEL, chunkSize: gzipChunkBytes(buf.length) });

/**
 * Kafka codec 1: gzip, as kafkajs's own codec (zlib's gzip and unzip) but written by {@link gzipCompress}, and
 * inflating stops at `limitBytes` (zlib's `maxOutputLength`) instead of growing its output without end.
 */
export const gzipCodec = (): KafkaCodec => ({
  compress: (encoder) => gzipCompress(encoder.buffer),
  decompress: async (buffer, limitBytes = maxDecompressedBytes()) => {
    try {
      return await unzip(buffer, { maxOutputLength: Math.min(limitBytes, MAX_BUFFER_BYTES) });
    } catch (e) {
      if ((e as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE')
        throw new OutputLimitError(`gzip inflates past ${limitBytes} bytes`, { cause: e });
      throw e;
    }
  },
});

/**
 * Kafka codec 2: kafkajs-snappy (snappyjs), except that snappy-java's xerial framing is read here: chunk by chunk,
 * joined once (kafkajs-snappy joins each chunk onto all before it, quadratic in the chunks: seconds of blocked event
 * loop for a batch of small chunks), with the chunks found by ./decompression-limit, which has checked each (one that
 * is itself a xerial stream, which kafkajs-snappy would read nested, is refused there).
 */
export const snappyXerialCodec = (): KafkaCodec => {
  const raw = snappyCodec();
  return {
    compress: (encoder) => raw.compress(encoder),
    decompress: async (buffer) => {
      if (!buffer.subarray(0, XERIAL_HEADER.length).equals(XERIAL_HEADER)) return raw.decompress(buffer);
      const parts: Buffer[] = [];
      for (const [start, end] of xerialChunks(buffer))
        parts.push(await raw.decompress(buffer.subarray(start, end)));
      return Buffer.concat(parts);
    },
  };
};

/** Kafka codec 3: LZ4 frame format, via lz4_flex (lz4-napi). */
export const lz4Codec = (): KafkaCodec => ({
  compress: async (encoder) => lz4CompressFrame(encoder.buffer),
  decompress: async (buffer) => lz4DecompressFrame(buffer),
});

/** Kafka codec 4 (KIP-110): zstd frames, read and written by node:zlib (see {@link zstdCompress}, {@link zstdDecompress}). */
export const zstdCodec = (): KafkaCodec => ({
  compress: (encoder) => zstdCompress(encoder.buffer),
  decompress: (buffer, limitBytes = maxDecompressedBytes()) => zstdDecompress(buffer, limitBytes),
});

/** kafkajs's parser of a partition's record set in a fetch response (fetch v4 to v11), with the project's patch. */
// eslint-disable-next-line @typescript-eslint/no-require-imports
const fetchRecordSetParser = require('kafkajs/src/protocol/requests/fetch/v4/decodeMessages') as {
  setDecodedBudget?: (budget: () => number, perRecordBytes: number) => void;
};

/** kafkajs's record batch parser (message format v2), with the project's patch. */
// eslint-disable-next-line @typescript-eslint/no-require-imports
const recordBatchParser = require('kafkajs/src/protocol/recordBatch/v0/decoder') as {
  setRecordCountGuard?: (
    budget: () => number,
    perRecordBytes: number,
    standIn: (batch: {
      codecId: number;
      baseOffset: string;
      lastOffset: string;
      records: number;
    }) => Buffer | undefined,
    isStandIn: (decompressed: Buffer) => boolean,
  ) => void;
};

let registered = false;

/** Registers gzip (1), snappy (2), lz4 (3), zstd (4) and failing codecs for 5-7 with kafkajs, all guarded. Idempotent; runs when this module is first imported. */
export function registerCompressionCodecs(): void {
  if (registered) return;
  const codecs = CompressionCodecs as Record<number, () => KafkaCodec>;
  codecs[CompressionTypes.GZIP] = guardedCodec(KAFKA_CODEC_IDS.gzip, gzipCodec);
  codecs[CompressionTypes.Snappy] = guardedCodec(KAFKA_CODEC_IDS.snappy, snappyXerialCodec);
  codecs[CompressionTypes.LZ4] = guardedCodec(KAFKA_CODEC_IDS.lz4, lz4Codec);
  codecs[CompressionTypes.ZSTD] = guardedCodec(KAFKA_CODEC_IDS.zstd, zstdCodec);
  for (let id = KAFKA_CODEC_IDS.zstd + 1; id <= CODEC_MASK; id++) codecs[id] = undefinedCodec(id);
  // A fetch decodes a partition's batches only while what it decoded is under the limit, each parsed record counted
  // with its object (patches/kafkajs+2.2.4.patch, "decoded budget").
  fetchRecordSetParser.setDecodedBudget?.(decompressionLimitOrDefault, PARSED_RECORD_BYTES);
  // A compressed batch counting more records than the limit holds parsed becomes one stand-in record, before it is
  // decompressed ("record count guard"): its stand-ins would cost as much as its records.
  recordBatchParser.setRecordCountGuard?.(
    decompressionLimitOrDefault,
    PARSED_RECORD_BYTES,
    (batch) =>
      standInRecords({
        ...batch,
        records: 1,
        reason: overLimitReason(
          `${batch.records} records parse to more than ${batch.records * PARSED_RECORD_BYTES} bytes`,
          decompressionLimitOrDefault(),
        ),
      }),
    isStandInRecords,
  );
  registered = true;
}

registerCompressionCodecs();
