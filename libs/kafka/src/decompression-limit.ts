/**
 * How many bytes a compressed record batch may decompress to, and what each codec's framing says about it before
 * anything is decompressed.
 *
 * Kafka's `max.message.bytes` counts compressed bytes, and the broker accepts any batch its codec can read, so a
 * few hundred KB of gzip (deflate reaches about 1032:1) or zstd (unbounded: RLE blocks, long-distance matches) may
 * hold gigabytes. A consumer that decompresses such a batch whole runs out of memory and, restarted, meets it again:
 * a crash loop. The codecs (./codecs) therefore refuse a batch whose output would pass the limit, before allocating
 * it where the framing declares sizes (zstd's frame content size, window and block sizes; snappy's lengths; the
 * LZ4 frame's block maximum and content size) and by zlib's `maxOutputLength` for gzip. A refused batch is an
 * undecodable batch (./undecodable): its partition is paused and named in /health, nothing is skipped.
 *
 * Formats: zstd RFC 8878 section 3.1; LZ4 frame format 1.6.x (lz4/doc/lz4_Frame_format.md); snappy
 * format_description.txt and snappy-java's xerial stream header; gzip RFC 1952.
 */
import { SettingsError } from '@keyflow/errors';

/** The environment variable that sets the limit (bytes, a positive integer). Process-wide, read at each batch. */
export const MAX_DECOMPRESSED_BYTES_SETTING = 'KEYFLOW_MAX_DECOMPRESSED_BYTES';

/**
 * Default limit: 256 MiB of records per batch. Above the 100 MiB a single produce request may carry
 * (`socket.request.max.bytes`), so every record another client could send uncompressed is read; zstd decoding may
 * hold the frame's window besides its output, so a process peaks at about twice this per batch being decoded.
 */
export const DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024;

/** KEYFLOW_MAX_DECOMPRESSED_BYTES is not a positive integer. */
export class DecompressionLimitConfigError extends SettingsError {
  readonly code = 'DECOMPRESSION_LIMIT_CONFIG';
  constructor(value: string) {
    super('decompression limit', [
      `${MAX_DECOMPRESSED_BYTES_SETTING}=${JSON.stringify(value)}: expected a positive integer of bytes`,
    ]);
  }
}

/**
 * The limit in bytes: KEYFLOW_MAX_DECOMPRESSED_BYTES, else {@link DEFAULT_MAX_DECOMPRESSED_BYTES}.
 * @throws DecompressionLimitConfigError when the variable is set to anything but a positive integer (createKafka
 *   calls this, so a service refuses to start with it).
 */
export function maxDecompressedBytes(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env[MAX_DECOMPRESSED_BYTES_SETTING];
  if (raw === undefined || raw.trim() === '') return DEFAULT_MAX_DECOMPRESSED_BYTES;
  const n = Number(raw);
  if (!/^\s*\d+\s*$/.test(raw) || !Number.isSafeInteger(n) || n <= 0)
    throw new DecompressionLimitConfigError(raw);
  return n;
}

/** The reason text of a batch refused for the limit (names the setting, so an operator knows what to raise). */
export function overLimitReason(what: string, limit: number): string {
  return `${what}, over ${MAX_DECOMPRESSED_BYTES_SETTING} (${limit} bytes); raise it if the batch is legitimate, or commit past it`;
}

/** Thrown by the bound walkers below for framing they cannot follow (the codec would reject it too). */
class Malformed extends Error {}

/**
 * What a walker learnt, updated as it goes, so framing that turns out malformed past a declared size is still
 * judged by that size (a decoder may allocate it before it meets the fault). Bytes.
 */
interface Bound {
  /** The most bytes the blocks seen so far decompress to. */
  output: number;
  /** The most bytes one frame or block makes a decoder allocate up front. */
  allocation: number;
}

const ZSTD_MAGIC = 0xfd2fb528;
const ZSTD_MAX_BLOCK_BYTES = 128 * 1024;
/** Skippable frames (zstd and LZ4 share them): magic 0x184D2A50-0x184D2A5F, a 4-byte size, that many bytes. */
const isSkippable = (magic: number) => magic >>> 4 === 0x184d2a5;

/**
 * The most bytes zstd frames (one or more, with skippable frames) decompress to, from their headers and block
 * headers alone, and the most one frame makes a decoder allocate up front (fzstd allocates a frame's declared content
 * size, else its window). A compressed block counts as the block maximum (min(window, 128 KiB)), an RLE or raw
 * block as its size. @throws Malformed on framing a decoder would reject.
 */
function zstdBound(buf: Buffer, b: Bound): void {
  let at = 0;
  while (at < buf.length) {
    if (at + 4 > buf.length) throw new Malformed('truncated zstd frame magic');
    const magic = buf.readUInt32LE(at);
    if (isSkippable(magic)) {
      if (at + 8 > buf.length) throw new Malformed('truncated skippable frame');
      at += 8 + buf.readUInt32LE(at + 4);
      continue;
    }
    if (magic !== ZSTD_MAGIC) throw new Malformed('not a zstd frame');
    const fhd = buf[at + 4];
    if (fhd === undefined) throw new Malformed('truncated zstd frame header');
    const fcsFlag = fhd >> 6;
    const single = (fhd >> 5) & 1;
    const checksum = (fhd >> 2) & 1;
    const dictFlag = fhd & 3;
    let p = at + 5;
    let window = 0;
    if (!single) {
      const wd = buf[p++];
      if (wd === undefined) throw new Malformed('truncated zstd window descriptor');
      const base = 2 ** (10 + (wd >> 3));
      window = base + (base / 8) * (wd & 7);
    }
    p += [0, 1, 2, 4][dictFlag];
    const fcsBytes = fcsFlag === 0 ? single : 1 << fcsFlag;
    if (p + fcsBytes > buf.length) throw new Malformed('truncated zstd frame header');
    let contentSize: number | undefined;
    if (fcsBytes === 1) contentSize = buf[p];
    else if (fcsBytes === 2) contentSize = buf.readUInt16LE(p) + 256;
    else if (fcsBytes === 4) contentSize = buf.readUInt32LE(p);
    else if (fcsBytes === 8) contentSize = Number(buf.readBigUInt64LE(p));
    p += fcsBytes;
    if (single) window = contentSize ?? 0;
    b.allocation = Math.max(b.allocation, contentSize || window);
    const blockMax = Math.min(window, ZSTD_MAX_BLOCK_BYTES);
    const before = b.output;
    for (let last = 0; !last;) {
      if (p + 3 > buf.length) throw new Malformed('truncated zstd block header');
      const h = buf[p] | (buf[p + 1] << 8) | (buf[p + 2] << 16);
      p += 3;
      last = h & 1;
      const type = (h >> 1) & 3;
      const size = h >>> 3;
      if (type === 3) throw new Malformed('reserved zstd block type');
      b.output += type === 0 || type === 1 ? size : blockMax;
      p += type === 1 ? 1 : size;
    }
    // A frame that declares its content size decodes to exactly that (RFC 8878 3.1.1.4) or fails.
    if (contentSize !== undefined) b.output = Math.min(b.output, before + contentSize);
    at = p + 4 * checksum;
  }
}

const LZ4_MAGIC = 0x184d2204;
const LZ4_BLOCK_MAX = [0, 0, 0, 0, 64 * 1024, 256 * 1024, 1024 * 1024, 4 * 1024 * 1024];
/**
 * LZ4's greatest expansion: a sequence's match length grows by 255 per extra length byte, so n compressed bytes
 * never make more than 255 n (plus a sequence's fixed 19 bytes: counted generously as 255 n for n >= 1).
 */
const LZ4_MAX_RATIO = 255;

/**
 * The most bytes LZ4 frames decompress to, from their frame and block headers: a compressed block counts as the
 * frame's block maximum or 255 times its size, whichever is less, an uncompressed one as its size, and a declared
 * content size must fit too.
 * @throws Malformed on framing a decoder would reject.
 */
function lz4Bound(buf: Buffer, b: Bound): void {
  let at = 0;
  while (at < buf.length) {
    if (at + 4 > buf.length) throw new Malformed('truncated LZ4 frame magic');
    const magic = buf.readUInt32LE(at);
    if (isSkippable(magic)) {
      if (at + 8 > buf.length) throw new Malformed('truncated skippable frame');
      at += 8 + buf.readUInt32LE(at + 4);
      continue;
    }
    if (magic !== LZ4_MAGIC) throw new Malformed('not an LZ4 frame');
    if (at + 7 > buf.length) throw new Malformed('truncated LZ4 frame header');
    const flg = buf[at + 4];
    const blockMax = LZ4_BLOCK_MAX[(buf[at + 5] >> 4) & 7];
    if (!blockMax) throw new Malformed('reserved LZ4 block maximum size');
    const blockChecksum = (flg >> 4) & 1;
    const hasContentSize = (flg >> 3) & 1;
    const contentChecksum = (flg >> 2) & 1;
    let p = at + 6;
    if (hasContentSize) {
      if (p + 8 > buf.length) throw new Malformed('truncated LZ4 frame header');
      b.allocation = Math.max(b.allocation, Number(buf.readBigUInt64LE(p)));
      p += 8;
    }
    p += 4 * (flg & 1) + 1; // dictionary id, header checksum
    for (;;) {
      if (p + 4 > buf.length) throw new Malformed('truncated LZ4 block');
      const word = buf.readUInt32LE(p);
      p += 4;
      if (word === 0) break; // end mark
      const size = word & 0x7fffffff;
      b.output += word & 0x80000000 ? size : Math.min(blockMax, LZ4_MAX_RATIO * size);
      p += size + 4 * blockChecksum;
    }
    at = p + 4 * contentChecksum;
  }
}

const XERIAL_HEADER = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00]);
const XERIAL_CHUNKS_AT = 16;

/** Raw snappy's preamble: the uncompressed length as a little-endian base-128 varint (at most 32 bits). */
function snappyLength(buf: Buffer, at: number, end: number): number {
  let n = 0;
  for (let shift = 0, p = at; shift <= 28; shift += 7, p++) {
    if (p >= end) throw new Malformed('truncated snappy length');
    n += (buf[p] & 0x7f) * 2 ** shift;
    if (buf[p] < 0x80) return n;
  }
  throw new Malformed('snappy length longer than 32 bits');
}

/**
 * The bytes raw snappy or snappy-java's xerial framing (4-byte big-endian chunk lengths after a 16-byte header)
 * declares: each block states its uncompressed length, which the decoder allocates.
 */
function snappyBound(buf: Buffer, b: Bound): void {
  if (!buf.subarray(0, XERIAL_HEADER.length).equals(XERIAL_HEADER)) {
    b.output = b.allocation = snappyLength(buf, 0, buf.length);
    return;
  }
  for (let at = XERIAL_CHUNKS_AT; at + 4 <= buf.length;) {
    const size = buf.readUInt32BE(at);
    at += 4;
    const n = snappyLength(buf, at, Math.min(buf.length, at + size));
    b.output += n;
    b.allocation = Math.max(b.allocation, n);
    at += size;
  }
}

/** Kafka codec ids (see ./codecs KAFKA_CODEC_IDS) whose framing declares sizes: 2 snappy, 3 lz4, 4 zstd. */
const BOUNDS: Record<number, { name: string; bound: (buf: Buffer, b: Bound) => void }> = {
  2: { name: 'snappy', bound: snappyBound },
  3: { name: 'LZ4', bound: lz4Bound },
  4: { name: 'zstd', bound: zstdBound },
};

/**
 * Why `compressed` (codec `codecId`'s bytes) must not be decompressed under `limit`, or undefined when its framing
 * keeps it within the limit (or the codec has no declared sizes: gzip is bounded while it inflates instead). Framing
 * that cannot be followed is judged by the sizes declared before the fault, and otherwise left to the codec, which
 * rejects it with its own reason.
 */
export function overDecompressionLimit(
  codecId: number,
  compressed: Buffer,
  limit: number,
): string | undefined {
  const f = BOUNDS[codecId];
  if (!f) return undefined;
  const b: Bound = { output: 0, allocation: 0 };
  try {
    f.bound(compressed, b);
  } catch (e) {
    // Judged by what was declared before the fault: the codec may allocate that much before it meets the fault.
    if (!(e instanceof Malformed)) throw e;
  }
  if (b.allocation > limit) return overLimitReason(`${f.name} framing declares ${b.allocation} bytes`, limit);
  if (b.output > limit) return overLimitReason(`${f.name} blocks may decompress to ${b.output} bytes`, limit);
  return undefined;
}
