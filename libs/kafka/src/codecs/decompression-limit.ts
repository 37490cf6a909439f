/**
 * How many bytes a compressed record batch may decompress to, and what each codec's framing says about it before
 * anything is decompressed.
 *
 * Kafka's `max.message.bytes` counts compressed bytes, and the broker accepts any batch its codec can read, so a
 * batch within the default 1 MiB may hold about 1 GiB of gzip (deflate reaches about 1032:1), 255 MiB of LZ4 or 32
 * GiB of zstd (an RLE block of 4 bytes makes 128 KiB), and a lax decoder makes more of framing that declares sizes
 * it does not hold. A consumer that decompresses such a batch whole runs out of memory and, restarted, meets it
 * again: a crash loop. The codecs (./codecs) therefore refuse a batch whose output would pass the limit before
 * decompressing it: the walkers below read zstd's frame and block headers, LZ4's block sequences and raw snappy's
 * elements (so the LZ4 and snappy figures are exact), and refuse framing they cannot follow (the decoders would
 * reject it too, but some allocate a declared size first, and snappyjs loops for ever on a negative literal
 * length). gzip inflates with zlib's `maxOutputLength`. Each parsed record also costs kafkajs an object of about
 * {@link PARSED_RECORD_BYTES} bytes, which counts against the limit too. A refused batch is an undecodable batch
 * (./undecodable): its partition is paused and named in /health, nothing is skipped.
 *
 * Formats: zstd RFC 8878 section 3.1; LZ4 frame format 1.6.x (lz4/doc/lz4_Frame_format.md); snappy
 * format_description.txt and snappy-java's xerial stream header; gzip RFC 1952.
 */
import { KeyflowError, retryableOf, SettingsError } from '@keyflow/errors';

/** The environment variable that sets the limit (bytes, a positive integer). Process-wide, read at each batch. */
export const MAX_DECOMPRESSED_BYTES_SETTING = 'KEYFLOW_MAX_DECOMPRESSED_BYTES';

/**
 * Default limit: 256 MiB of records per batch. Above the 100 MiB a single produce request may carry
 * (`socket.request.max.bytes`), so every record another client could send uncompressed is read, and above the
 * largest zstd window (128 MiB, level 22; libzstd's default windowLogMax), which node:zlib's streaming zstd decoder
 * allocates for a frame that does not declare its size. The
 * decoders hold their output, their window or parts and a joined copy at once: a process peaks at up to three times
 * this per batch being decoded.
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

/**
 * What kafkajs's parsed record costs besides its bytes, in bytes (its object, the key and value views and the
 * headers object: about 94 measured on Node 20), counted against the limit per record.
 */
export const PARSED_RECORD_BYTES = 100;

/**
 * The limit, or the default when KEYFLOW_MAX_DECOMPRESSED_BYTES was made invalid after startup (createKafka refuses
 * an invalid one): inside the fetch parser a throw would fail every fetch or quarantine every compressed partition.
 */
export function decompressionLimitOrDefault(): number {
  try {
    return maxDecompressedBytes();
  } catch {
    return DEFAULT_MAX_DECOMPRESSED_BYTES;
  }
}

/** The reason text of a batch refused for the limit (names the setting, so an operator knows what to raise). */
export function overLimitReason(what: string, limit: number): string {
  return `${what}, over ${MAX_DECOMPRESSED_BYTES_SETTING} (${limit} bytes); raise it if the batch is legitimate, or commit past it`;
}

/**
 * A codec's output would pass the room it was given (gzip's `maxOutputLength`), in bytes. Not retryable: the same
 * bytes inflate the same way. The codecs turn it into an undecodable batch naming the limit.
 */
export class OutputLimitError extends KeyflowError {
  readonly code = 'DECOMPRESSED_TOO_LARGE';
  readonly retryable = retryableOf('DECOMPRESSED_TOO_LARGE');
}

/** Thrown by the walkers below for framing they cannot follow: the batch is refused. */
class Malformed extends Error {}

const need = (ok: boolean, what: string): void => {
  if (!ok) throw new Malformed(what);
};

/** What a walker found, in bytes. */
interface Bound {
  /** The most bytes the decoder returns. */
  output: number;
  /** The most bytes one frame makes the decoder allocate up front (a declared size or a window). */
  allocation: number;
  /** A frame's window times its blocks, when it declares no content size (zstd only; see ZSTD_MOVED_PER_LIMIT). */
  moved?: number;
}

/**
 * How many times the limit a zstd frame without a content size may reach as its window times its blocks (bytes). A
 * producer's frame of full 128 KiB blocks reaches 16 times its output with the 2 MiB window of level 3 and 64 times
 * with an 8 MiB one; a frame of one-byte blocks under a 128 MiB window is a bomb's shape (fzstd, keyflow's reader
 * before node:zlib's, slid its window once per block: 10 ms per byte of output), refused whichever decoder reads it.
 */
export const ZSTD_MOVED_PER_LIMIT = 64;

const ZSTD_MAGIC = 0xfd2fb528;
const ZSTD_MAX_BLOCK_BYTES = 128 * 1024;
/** Skippable frames (zstd and LZ4 share them): magic 0x184D2A50-0x184D2A5F, a 4-byte size, that many bytes. */
const isSkippable = (magic: number) => magic >>> 4 === 0x184d2a5;

/** The 4-byte little-endian magic number of the frame (`codec`'s, or a skippable one) at `at`. @throws Malformed. */
function frameMagic(buf: Buffer, at: number, codec: string): number {
  need(at + 4 <= buf.length, `truncated ${codec} frame magic`);
  return buf.readUInt32LE(at);
}

/** Where the skippable frame at `at` ends, or undefined when `magic` is not a skippable frame's. @throws Malformed. */
function skippableEnd(buf: Buffer, at: number, magic: number): number | undefined {
  if (!isSkippable(magic)) return undefined;
  need(at + 8 <= buf.length, 'truncated skippable frame');
  const end = at + 8 + buf.readUInt32LE(at + 4);
  need(end <= buf.length, 'truncated skippable frame');
  return end;
}

/**
 * zstd frames (one or more, with skippable frames), RFC 8878 section 3.1, counted as the laxest decoder would read
 * them: a frame that declares a non-zero content size makes that many bytes (node:zlib's libzstd sizes its buffers by
 * it and refuses blocks that make another size; a lax decoder zero-fills); otherwise its blocks' (raw and RLE blocks
 * their size, not checked against 128 KiB; a compressed block at most min(window, 128 KiB)), with the window
 * allocated up front (libzstd's streaming decoder does) and counted once per block (`moved`).
 */
function zstdBound(buf: Buffer): Bound {
  const b: Bound = { output: 0, allocation: 0, moved: 0 };
  let at = 0;
  while (at < buf.length) {
    const magic = frameMagic(buf, at, 'zstd');
    const skipped = skippableEnd(buf, at, magic);
    if (skipped !== undefined) {
      at = skipped;
      continue;
    }
    need(magic === ZSTD_MAGIC, 'not a zstd frame');
    need(at + 5 <= buf.length, 'truncated zstd frame header');
    const fhd = buf[at + 4];
    const fcsFlag = fhd >> 6;
    const single = (fhd >> 5) & 1;
    const checksum = (fhd >> 2) & 1;
    let p = at + 5;
    let window = 0;
    if (!single) {
      need(p < buf.length, 'truncated zstd window descriptor');
      const wd = buf[p++];
      const base = 2 ** (10 + (wd >> 3));
      window = base + (base / 8) * (wd & 7);
    }
    p += [0, 1, 2, 4][fhd & 3]; // dictionary id
    const fcsBytes = fcsFlag === 0 ? single : 2 ** fcsFlag;
    need(p + fcsBytes <= buf.length, 'truncated zstd frame content size');
    let declared = 0;
    if (fcsBytes === 1) declared = buf[p];
    else if (fcsBytes === 2) declared = buf.readUInt16LE(p) + 256;
    else if (fcsBytes === 4) declared = buf.readUInt32LE(p);
    else if (fcsBytes === 8) declared = Number(buf.readBigUInt64LE(p));
    p += fcsBytes;
    if (single) window = declared;
    b.allocation = Math.max(b.allocation, declared || window);
    const blockMax = Math.min(window, ZSTD_MAX_BLOCK_BYTES);
    let blocks = 0;
    for (let last = 0; !last;) {
      need(p + 3 <= buf.length, 'truncated zstd block header');
      const h = buf[p] | (buf[p + 1] << 8) | (buf[p + 2] << 16);
      p += 3;
      last = h & 1;
      const type = (h >> 1) & 3;
      const size = h >>> 3;
      need(type !== 3, 'reserved zstd block type');
      blocks += type === 2 ? blockMax : size;
      p += type === 1 ? 1 : size;
      // Without a declared size a decoder decodes into its window, block after block.
      if (!declared) b.moved! += window;
      need(p <= buf.length, 'truncated zstd block');
    }
    b.output += declared || blocks;
    at = p + 4 * checksum;
    need(at <= buf.length, 'truncated zstd checksum');
  }
  return b;
}

/** Reads an LZ4 length extension (bytes of 255 until one below) from `p`; returns [added length, next position]. */
function lz4Extension(buf: Buffer, p: number, end: number): [number, number] {
  let n = 0;
  for (;;) {
    need(p < end, 'truncated LZ4 length');
    const x = buf[p++];
    n += x;
    if (x !== 255) return [n, p];
  }
}

/** The exact bytes an LZ4 block (buf[start, end)) decodes to, from its sequences' tokens and lengths. */
function lz4BlockOutput(buf: Buffer, start: number, end: number): number {
  let p = start;
  let out = 0;
  while (p < end) {
    const token = buf[p++];
    let literals = token >> 4;
    if (literals === 15) {
      const [more, q] = lz4Extension(buf, p, end);
      literals += more;
      p = q;
    }
    p += literals;
    out += literals;
    need(p <= end, 'LZ4 literals past the block');
    if (p === end) break; // the last sequence has literals only
    need(p + 2 <= end, 'truncated LZ4 match offset');
    p += 2;
    let match = token & 15;
    if (match === 15) {
      const [more, q] = lz4Extension(buf, p, end);
      match += more;
      p = q;
    }
    out += match + 4;
  }
  return out;
}

const LZ4_MAGIC = 0x184d2204;
const LZ4_LEGACY_MAGIC = 0x184c2102;
const LZ4_BLOCK_MAX = [0, 0, 0, 0, 64 * 1024, 256 * 1024, 1024 * 1024, 4 * 1024 * 1024];

/**
 * LZ4 frames (lz4/doc/lz4_Frame_format.md), legacy frames included: the exact bytes their blocks decode to; a
 * declared content size is an allocation.
 */
function lz4Bound(buf: Buffer): Bound {
  const b: Bound = { output: 0, allocation: 0 };
  let at = 0;
  while (at < buf.length) {
    const magic = frameMagic(buf, at, 'LZ4');
    const skipped = skippableEnd(buf, at, magic);
    if (skipped !== undefined) {
      at = skipped;
      continue;
    }
    if (magic === LZ4_LEGACY_MAGIC) {
      // Blocks of a 4-byte size until the input ends or the next frame's magic.
      let p = at + 4;
      while (p + 4 <= buf.length) {
        const size = buf.readUInt32LE(p);
        if (size === LZ4_MAGIC || size === LZ4_LEGACY_MAGIC || isSkippable(size)) break;
        need(p + 4 + size <= buf.length, 'truncated LZ4 legacy block');
        b.output += lz4BlockOutput(buf, p + 4, p + 4 + size);
        p += 4 + size;
      }
      need(p === buf.length || p + 4 <= buf.length, 'truncated LZ4 legacy block');
      at = p;
      continue;
    }
    need(magic === LZ4_MAGIC, 'not an LZ4 frame');
    need(at + 7 <= buf.length, 'truncated LZ4 frame header');
    const flg = buf[at + 4];
    need(LZ4_BLOCK_MAX[(buf[at + 5] >> 4) & 7] > 0, 'reserved LZ4 block maximum size');
    const blockChecksum = (flg >> 4) & 1;
    const contentChecksum = (flg >> 2) & 1;
    let p = at + 6;
    if ((flg >> 3) & 1) {
      need(p + 8 <= buf.length, 'truncated LZ4 content size');
      b.allocation = Math.max(b.allocation, Number(buf.readBigUInt64LE(p)));
      p += 8;
    }
    p += 4 * (flg & 1) + 1; // dictionary id, header checksum
    for (;;) {
      need(p + 4 <= buf.length, 'truncated LZ4 block');
      const word = buf.readUInt32LE(p);
      p += 4;
      if (word === 0) break; // end mark
      const size = word & 0x7fffffff;
      need(p + size <= buf.length, 'truncated LZ4 block');
      b.output += word & 0x80000000 ? size : lz4BlockOutput(buf, p, p + size);
      p += size + 4 * blockChecksum;
    }
    at = p + 4 * contentChecksum;
    need(at <= buf.length, 'truncated LZ4 checksum');
  }
  return b;
}

/**
 * The exact bytes raw snappy (buf[start, end)) decodes to (snappy format_description.txt): its preamble's length,
 * checked against the elements (literals and copies), whose lengths are read unsigned. @throws Malformed.
 */
function snappyRawOutput(buf: Buffer, start: number, end: number): number {
  let declared = 0;
  let p = start;
  for (let shift = 0; ; shift += 7) {
    need(p < end && shift <= 28, 'bad snappy length');
    const x = buf[p++];
    declared += (x & 0x7f) * 2 ** shift;
    if (x < 0x80) break;
  }
  let out = 0;
  while (p < end) {
    const tag = buf[p++];
    const kind = tag & 3;
    let len: number;
    if (kind === 0) {
      len = tag >> 2;
      if (len >= 60) {
        const n = len - 59;
        need(p + n <= end, 'truncated snappy literal length');
        len = buf.readUIntLE(p, n);
        p += n;
      }
      len += 1;
      p += len;
    } else if (kind === 1) {
      len = ((tag >> 2) & 7) + 4;
      p += 1;
    } else {
      len = (tag >> 2) + 1;
      p += kind === 2 ? 2 : 4;
    }
    need(p <= end, 'snappy element past the block');
    out += len;
    need(out <= declared, 'snappy elements longer than the declared length');
  }
  need(out === declared, 'snappy elements shorter than the declared length');
  return declared;
}

/** snappy-java's xerial stream header; chunks (a 4-byte big-endian length, then raw snappy) start at byte 16. */
export const XERIAL_HEADER = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00]);
export const XERIAL_CHUNKS_AT = 16;

/** The [start, end) of each raw snappy chunk of a xerial stream. @throws Malformed on a chunk past the end. */
export function xerialChunks(buf: Buffer): Array<[number, number]> {
  const chunks: Array<[number, number]> = [];
  for (let at = XERIAL_CHUNKS_AT; at < buf.length;) {
    need(at + 4 <= buf.length, 'truncated xerial chunk length');
    const end = at + 4 + buf.readUInt32BE(at);
    need(end <= buf.length, 'truncated xerial chunk');
    // kafkajs-snappy reads a chunk that starts with the stream header as a nested stream, not as raw snappy.
    need(!buf.subarray(at + 4, at + 4 + XERIAL_HEADER.length).equals(XERIAL_HEADER), 'nested xerial stream');
    chunks.push([at + 4, end]);
    at = end;
  }
  return chunks;
}

/** Raw snappy, or snappy-java's xerial framing: the exact bytes each block declares and decodes to. */
function snappyBound(buf: Buffer): Bound {
  if (!buf.subarray(0, XERIAL_HEADER.length).equals(XERIAL_HEADER)) {
    const n = snappyRawOutput(buf, 0, buf.length);
    return { output: n, allocation: n };
  }
  const b: Bound = { output: 0, allocation: 0 };
  for (const [start, end] of xerialChunks(buf)) {
    const n = snappyRawOutput(buf, start, end);
    b.output += n;
    b.allocation = Math.max(b.allocation, n);
  }
  return b;
}

/** Kafka codec ids (see ./codecs KAFKA_CODEC_IDS) whose framing the walkers read: 2 snappy, 3 lz4, 4 zstd. */
const BOUNDS: Record<number, { name: string; bound: (buf: Buffer) => Bound }> = {
  2: { name: 'snappy', bound: snappyBound },
  3: { name: 'LZ4', bound: lz4Bound },
  4: { name: 'zstd', bound: zstdBound },
};

/**
 * Why `compressed` (codec `codecId`'s bytes) must not be decompressed into `room` bytes (what `limit` leaves after
 * the batch's parsed records; the reason names `limit`), or undefined when its
 * framing keeps it within the limit (gzip has no such framing: it is bounded while it inflates instead). Framing the
 * walker cannot follow is refused too: a batch from a Kafka producer is never cut short, and a decoder meeting it
 * may allocate what it declares, or not end.
 */
export function overDecompressionLimit(
  codecId: number,
  compressed: Buffer,
  room: number,
  limit = room,
): string | undefined {
  const f = BOUNDS[codecId];
  if (!f) return undefined;
  let b: Bound;
  try {
    b = f.bound(compressed);
  } catch (e) {
    if (e instanceof Malformed) return `malformed ${f.name} framing (${e.message}), refused before decoding`;
    throw e;
  }
  const records = room < limit ? ` (room left by the parsed records: ${room})` : '';
  if (b.allocation > room)
    return overLimitReason(`${f.name} framing declares ${b.allocation} bytes${records}`, limit);
  if (b.output > room)
    return overLimitReason(`${f.name} blocks decompress to ${b.output} bytes${records}`, limit);
  if ((b.moved ?? 0) > ZSTD_MOVED_PER_LIMIT * room)
    return overLimitReason(
      `zstd frames without a content size slide their window over ${b.moved} bytes while decoding (more than ${ZSTD_MOVED_PER_LIMIT} times the limit)`,
      limit,
    );
  return undefined;
}
