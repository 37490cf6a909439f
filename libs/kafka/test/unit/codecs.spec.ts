import { CompressionCodecs, CompressionTypes, KafkaJSNotImplemented } from 'kafkajs';
import {
  KAFKA_CODEC_IDS,
  UNDECODABLE_HEADER,
  UndecodableBatchError,
  undecodableAt,
  registerCompressionCodecs,
  MAX_DECOMPRESSED_BYTES_SETTING,
  maxDecompressedBytes,
  type KafkaCodec,
  GZIP_LEVEL,
  gzipCompress,
} from '../../src';
import { gunzipSync } from 'node:zlib';

// kafkajs's own record batch encoder and decoder (message format v2), as its producer and fetch path use them.
/* eslint-disable @typescript-eslint/no-require-imports */
const { RecordBatch } = require('kafkajs/src/protocol/recordBatch/v0') as {
  RecordBatch: (b: object) => Promise<{ buffer: Buffer }>;
};
const Record = require('kafkajs/src/protocol/recordBatch/record/v0') as (r: object) => unknown;
const decodeBatch = require('kafkajs/src/protocol/recordBatch/v0/decoder') as (d: unknown) => Promise<{
  records: Array<{ key: Buffer; value: Buffer; offset: string; headers: Record<string, Buffer> }>;
}>;
const Decoder = require('kafkajs/src/protocol/decoder') as new (b: Buffer) => unknown;
const Long = require('kafkajs/src/utils/long') as { fromValue(v: number): unknown };
// The fetch response's per-partition record set parser (fetch v4 to v11).
const decodeMessages = require('kafkajs/src/protocol/requests/fetch/v4/decodeMessages') as (
  d: unknown,
) => Promise<Array<{ offset: string; value: Buffer }>>;
const Encoder = require('kafkajs/src/protocol/encoder') as new () => {
  writeInt32(n: number): unknown;
  writeBuffer(b: Buffer): unknown;
  buffer: Buffer;
};
/* eslint-enable @typescript-eslint/no-require-imports */

registerCompressionCodecs();

const ATTRIBUTES_LOW_BYTE = 22; // record batch v2: attributes int16 at byte 21
const RECORDS_START = 61; // record batch v2 header length: the compressed records follow it
const BASE_OFFSET = 100;

async function batch(
  compression: CompressionTypes,
  valueBytes = 300,
  baseOffset = BASE_OFFSET,
): Promise<Buffer> {
  const records = [0, 1, 2].map((i) =>
    Record({ offsetDelta: i, key: Buffer.from(`k${i}`), value: Buffer.alloc(valueBytes, i) }),
  );
  const b = await RecordBatch({
    compression,
    firstOffset: Long.fromValue(baseOffset),
    lastOffsetDelta: 2,
    records,
  });
  // Copied into a larger buffer, as kafkajs's decoder sees a batch: a view into a fetch response.
  return Buffer.concat([Buffer.alloc(7), b.buffer]).subarray(7);
}

const decode = (bytes: Buffer) => decodeBatch(new Decoder(bytes));

describe('compression codecs registered with kafkajs', () => {
  it.each([
    ['gzip', CompressionTypes.GZIP],
    ['snappy', CompressionTypes.Snappy],
    ['lz4', CompressionTypes.LZ4],
  ] as const)('a %s record batch written by kafkajs reads back the same records', async (_name, type) => {
    const bytes = await batch(type);
    expect(bytes[ATTRIBUTES_LOW_BYTE] & 0x07).toBe(type);
    const { records } = await decode(bytes);
    expect(
      records.map((r) => [
        r.offset,
        r.key.toString(),
        r.value.equals(Buffer.alloc(300, Number(r.offset) - BASE_OFFSET)),
      ]),
    ).toEqual([
      ['100', 'k0', true],
      ['101', 'k1', true],
      ['102', 'k2', true],
    ]);
  });

  it('gzip is written at GZIP_LEVEL (fastest) by batches and by gzipCompress alike, which DLQ fitting measures with', async () => {
    // RFC 1952 2.3.1: XFL (byte 8 of the member header) is 4 when the fastest algorithm was used, 2 for maximum.
    const XFL = 8;
    expect(GZIP_LEVEL).toBe(1);
    const bytes = await batch(CompressionTypes.GZIP);
    expect(bytes[RECORDS_START + XFL]).toBe(4);
    const value = Buffer.from('a record value '.repeat(5_000));
    const measured = await gzipCompress(value);
    expect(measured[XFL]).toBe(4);
    expect(gunzipSync(measured).equals(value)).toBe(true);
  });

  it('zstd batches are written by node:zlib, declare their content size, and read back', async () => {
    const bytes = await batch(CompressionTypes.ZSTD);
    // zstd frame header descriptor (RFC 8878 3.1.1.1): a Frame_Content_Size_Flag, or the single-segment flag.
    expect(bytes[RECORDS_START + 4] & 0xe0).not.toBe(0);
    const { records } = await decode(bytes);
    expect(records).toHaveLength(3);
  });

  it("corrupt compressed bytes decode to stand-ins at the batch's last offset naming the codec, offsets and reason, never a failed fetch", async () => {
    const bytes = Buffer.from(await batch(CompressionTypes.LZ4));
    bytes.fill(0xab, RECORDS_START + 4, RECORDS_START + 40); // inside the LZ4 frame, past its magic number
    const { records } = await decode(bytes);
    // One stand-in for the batch, whatever its header counts (the patched parser takes it alone), at its last offset
    // (the broker returns a batch only when its last offset is at or past the fetch offset).
    expect(records.map((r) => [r.offset, r.key, r.value])).toEqual([['102', null, null]]);
    expect(undecodableAt(records)).toEqual({
      index: 0,
      batch: expect.objectContaining({
        codecId: KAFKA_CODEC_IDS.lz4,
        baseOffset: '100',
        lastOffset: '102',
        reason: expect.any(String),
      }),
    });
  });

  it('a batch with a codec id Kafka does not define (5-7) decodes to stand-ins instead of being parsed as records', async () => {
    const bytes = Buffer.from(await batch(CompressionTypes.GZIP));
    bytes[ATTRIBUTES_LOW_BYTE] = (bytes[ATTRIBUTES_LOW_BYTE] & ~0x07) | 5;
    const { records } = await decode(bytes);
    expect(undecodableAt(records)?.batch).toMatchObject({ codecId: 5, baseOffset: '100', lastOffset: '102' });
  });

  it("a record carrying the marker header without this process's nonce is an ordinary record (a producer cannot pause a partition)", () => {
    const forged = {
      key: null,
      value: null,
      headers: { [UNDECODABLE_HEADER]: Buffer.from('{"nonce":"x","codecId":5}') },
    };
    expect(undecodableAt([forged])).toBeUndefined();
  });

  it('compressed bytes whose batch header is not around them (no fetch-response view) still fail with UNDECODABLE_BATCH, which kafkajs does not retry', async () => {
    const codec = (CompressionCodecs as Record<number, () => { decompress(b: Buffer): Promise<Buffer> }>)[
      CompressionTypes.LZ4
    ]();
    const err = await codec.decompress(Buffer.alloc(40, 0xab)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UndecodableBatchError);
    expect(err).toMatchObject({ code: 'UNDECODABLE_BATCH', retryable: false, codecId: KAFKA_CODEC_IDS.lz4 });
    expect(err).toBeInstanceOf(KafkaJSNotImplemented);
  });
});

describe('a record batch that decompresses past the limit (KEYFLOW_MAX_DECOMPRESSED_BYTES)', () => {
  const LIMIT = 1024 * 1024;
  beforeEach(() => {
    process.env[MAX_DECOMPRESSED_BYTES_SETTING] = String(LIMIT);
  });
  afterEach(() => {
    delete process.env[MAX_DECOMPRESSED_BYTES_SETTING];
  });

  const codec = (id: number) => (CompressionCodecs as Record<number, () => KafkaCodec>)[id]();

  it.each([
    ['gzip', CompressionTypes.GZIP],
    ['snappy', CompressionTypes.Snappy],
    ['lz4', CompressionTypes.LZ4],
    ['zstd', CompressionTypes.ZSTD],
  ] as const)(
    'a %s batch over the limit decodes to stand-ins naming the limit, and one under it reads back',
    async (_name, type) => {
      // Three records of 400 KB: 1.2 MB of records, over the 1 MiB limit; a few KB once compressed.
      const { records } = await decode(await batch(type, 400_000));
      expect(undecodableAt(records)).toEqual({
        index: 0,
        batch: expect.objectContaining({
          codecId: type,
          baseOffset: '100',
          lastOffset: '102',
          reason: expect.stringContaining(`${MAX_DECOMPRESSED_BYTES_SETTING} (${LIMIT} bytes)`),
        }),
      });
      const under = await decode(await batch(type, 300_000));
      expect(under.records.map((r) => r.value.length)).toEqual([300_000, 300_000, 300_000]);
    },
  );

  // zstd frame header (RFC 8878 3.1.1): magic, descriptor (8-byte content size, single segment), content size.
  const zstdFrame = (contentSize: bigint, body: Buffer) => {
    const h = Buffer.alloc(4 + 1 + 8);
    h.writeUInt32LE(0xfd2fb528, 0);
    h[4] = 0xe0;
    h.writeBigUInt64LE(contentSize, 5);
    return Buffer.concat([h, body]);
  };
  // One last raw block of one byte (block header: last bit, type 0, size 1).
  const oneRawBlock = Buffer.from([0b1001, 0, 0, 0x61]);

  it('a zstd frame declaring a content size over the limit is refused before its output is allocated', async () => {
    const before = process.memoryUsage().arrayBuffers;
    const out = await codec(CompressionTypes.ZSTD)
      .decompress(zstdFrame(2_000_000_000n, oneRawBlock))
      .catch((e: unknown) => e);
    expect(out).toBeInstanceOf(UndecodableBatchError);
    expect((out as Error).message).toContain(MAX_DECOMPRESSED_BYTES_SETTING);
    // A decoder may allocate a frame's declared content size up front (fzstd, read before Node 22 did): 2 GB.
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(100 * 1024 * 1024);
  });

  it('zstd blocks that repeat one byte past the limit (RLE blocks) are refused by their declared sizes', async () => {
    // 16 RLE blocks of 128 KiB: 2 MiB out of 60 bytes, no content size in the frame header.
    const h = Buffer.from([0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38]); // descriptor 0, window 8 MiB
    const rle = (last: boolean) => {
      const header = ((128 * 1024) << 3) | (1 << 1) | (last ? 1 : 0);
      return Buffer.from([header & 0xff, (header >> 8) & 0xff, (header >> 16) & 0xff, 0x62]);
    };
    const frame = Buffer.concat([h, ...Array.from({ length: 16 }, (_, i) => rle(i === 15))]);
    process.env[MAX_DECOMPRESSED_BYTES_SETTING] = String(4 * 1024 * 1024);
    expect((await codec(CompressionTypes.ZSTD).decompress(frame)).length).toBe(2 * 1024 * 1024);
    process.env[MAX_DECOMPRESSED_BYTES_SETTING] = String(LIMIT);
    const out = await codec(CompressionTypes.ZSTD)
      .decompress(frame)
      .catch((e: unknown) => e);
    expect(out).toBeInstanceOf(UndecodableBatchError);
    expect((out as Error).message).toContain(MAX_DECOMPRESSED_BYTES_SETTING);
  });

  /** Decodes `bytes` with codec `id`, measuring what was allocated meanwhile (ArrayBuffers, bytes). */
  const decodeMeasured = async (id: number, bytes: Buffer) => {
    const before = process.memoryUsage().arrayBuffers;
    const out = await codec(id)
      .decompress(bytes)
      .catch((e: unknown) => e);
    return { out, grew: process.memoryUsage().arrayBuffers - before };
  };
  const HUNDRED_MB = 100 * 1024 * 1024;

  it('a snappy block declaring a length over the limit is refused before its output is allocated', async () => {
    // Raw snappy: the uncompressed length as a varint (here 0xFFFFFFF0), then one literal of one byte.
    const { out, grew } = await decodeMeasured(
      CompressionTypes.Snappy,
      Buffer.from([0xf0, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x61]),
    );
    expect(out).toBeInstanceOf(UndecodableBatchError);
    expect((out as Error).message).toContain('malformed snappy framing');
    expect(grew).toBeLessThan(HUNDRED_MB);
  });

  it('a snappy literal whose 4-byte length is negative to snappyjs is refused, not decoded for ever', async () => {
    // Declared length 0, then a literal tag with a 4-byte length of 0xFFFFFFFA: snappyjs reads it signed (-5) and
    // steps back onto the same tag without end.
    const { out } = await decodeMeasured(
      CompressionTypes.Snappy,
      Buffer.from([0x00, 0xfc, 0xfa, 0xff, 0xff, 0xff]),
    );
    expect(out).toBeInstanceOf(UndecodableBatchError);
  });

  it('snappy-java chunks that each declare 1 GiB behind an empty chunk are refused before any is allocated', async () => {
    const chunk = Buffer.from([0x00, 0x00, 0x00, 0x05, 0x80, 0x80, 0x80, 0x80, 0x04]);
    const xerial = Buffer.concat([
      Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00, 0, 0, 0, 1, 0, 0, 0, 1]),
      Buffer.alloc(4),
      chunk,
      chunk,
      chunk,
      chunk,
    ]);
    const { out, grew } = await decodeMeasured(CompressionTypes.Snappy, xerial);
    expect(out).toBeInstanceOf(UndecodableBatchError);
    expect(grew).toBeLessThan(HUNDRED_MB);
  });

  it('snappy-java framing from another client reads back, chunk by chunk', async () => {
    const raw = codec(CompressionTypes.Snappy);
    const data = Buffer.from(Array.from({ length: 5000 }, (_, i) => `record ${i};`).join(''));
    const chunks = [];
    for (let at = 0; at < data.length; at += 1000) {
      const c = await raw.compress({ buffer: data.subarray(at, at + 1000) });
      const size = Buffer.alloc(4);
      size.writeUInt32BE(c.length);
      chunks.push(size, c);
    }
    const xerial = Buffer.concat([
      Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00, 0, 0, 0, 1, 0, 0, 0, 1]),
      ...chunks,
    ]);
    expect((await codec(CompressionTypes.Snappy).decompress(xerial)).equals(data)).toBe(true);
  });

  const zstdRle = (size: number, last: boolean) => {
    const h = (size << 3) | (1 << 1) | (last ? 1 : 0);
    return Buffer.from([h & 0xff, (h >> 8) & 0xff, (h >> 16) & 0xff, 0x41]);
  };

  it('a zstd frame declaring a content size of 0 is judged by its blocks, which a lax decoder decodes regardless', async () => {
    // Not single-segment, window 1 MiB, a 4-byte content size of 0, then 48 RLE blocks of 1 MiB: fzstd returned 48 MiB.
    const frame = Buffer.concat([
      Buffer.from([0x28, 0xb5, 0x2f, 0xfd, 0x80, 0x50, 0, 0, 0, 0]),
      ...Array.from({ length: 48 }, (_, i) => zstdRle(1 << 20, i === 47)),
    ]);
    const { out, grew } = await decodeMeasured(CompressionTypes.ZSTD, frame);
    expect(out).toBeInstanceOf(UndecodableBatchError);
    // Refused by what its blocks make (50,331,648 bytes), before they are decoded.
    expect((out as Error).message).toContain('zstd blocks decompress to 50331648 bytes');
    expect(grew).toBeLessThan(HUNDRED_MB / 4);
  });

  it('zstd frames that each declare a size they do not hold count in full (a lax decoder returns the declared size)', async () => {
    // 64 frames (768 bytes) declaring 1 MiB each, one empty last block each: fzstd returned 64 MiB of zeros.
    const frame = Buffer.from([0x28, 0xb5, 0x2f, 0xfd, 0xa0, 0, 0, 0x10, 0, 0x01, 0, 0]);
    const { out, grew } = await decodeMeasured(CompressionTypes.ZSTD, Buffer.concat(Array(64).fill(frame)));
    expect(out).toBeInstanceOf(UndecodableBatchError);
    expect(grew).toBeLessThan(HUNDRED_MB / 4);
  });

  it.each([
    ['an 8-byte content size cut short', [0x28, 0xb5, 0x2f, 0xfd, 0xe0, 0x00, 0x00, 0xe0, 0x7f]],
    ['a window of 1.875 GiB with its content size missing', [0x28, 0xb5, 0x2f, 0xfd, 0xc0, 0xa7]],
  ])(
    'a zstd frame header with %s is refused before a decoder allocates what it declares',
    async (_what, bytes) => {
      const { out, grew } = await decodeMeasured(CompressionTypes.ZSTD, Buffer.from(bytes));
      expect(out).toBeInstanceOf(UndecodableBatchError);
      expect((out as Error).message).toContain('malformed zstd framing');
      expect(grew).toBeLessThan(HUNDRED_MB);
    },
  );

  it('an LZ4 legacy frame is judged by its blocks as well', async () => {
    const lz4 = require('lz4-napi') as { compress(b: Buffer): Promise<Buffer> }; // eslint-disable-line @typescript-eslint/no-require-imports
    // lz4-napi's block format prefixes the decompressed size (4 bytes); a legacy block is the bare block.
    const block = (await lz4.compress(Buffer.alloc(8 << 20, 0x41))).subarray(4);
    const size = Buffer.alloc(4);
    size.writeUInt32LE(block.length);
    const legacy = Buffer.concat([Buffer.from([0x02, 0x21, 0x4c, 0x18]), size, block]);
    const { out } = await decodeMeasured(CompressionTypes.LZ4, legacy);
    expect(out).toBeInstanceOf(UndecodableBatchError);
    expect((out as Error).message).toContain('LZ4 blocks decompress to 8388608 bytes');
  });

  it('an LZ4 frame with one 4 MiB block is judged by what its sequences make, not by its block maximum', async () => {
    // lz4-napi writes one block of up to 4 MiB: 1.5 MB of text under a 2 MiB limit reads back.
    process.env[MAX_DECOMPRESSED_BYTES_SETTING] = String(2 * LIMIT);
    const text = Buffer.from(
      Array.from({ length: 60_000 }, (_, i) => `{"id":${i},"name":"city ${i % 977}"}`).join('\n'),
    );
    const frame = await codec(CompressionTypes.LZ4).compress({ buffer: text });
    expect(text.length).toBeGreaterThan(LIMIT);
    expect((await codec(CompressionTypes.LZ4).decompress(frame)).equals(text)).toBe(true);
  });

  it('a batch of many tiny records counts the parsed records against the limit', async () => {
    // 20,000 records of a null value: 0.5 MB of records, 2 MB of parsed record objects (100 bytes each).
    const records = Array.from({ length: 20_000 }, (_, i) =>
      Record({ offsetDelta: i, key: null, value: null }),
    );
    const b = await RecordBatch({
      compression: CompressionTypes.ZSTD,
      firstOffset: Long.fromValue(BASE_OFFSET),
      lastOffsetDelta: records.length - 1,
      records,
    });
    const { records: read } = await decode(Buffer.concat([Buffer.alloc(7), b.buffer]).subarray(7));
    expect(undecodableAt(read)?.batch.reason).toContain('20000 records parse to more than 2000000 bytes');
    expect(read).toHaveLength(1); // one stand-in, not 20,000
  });

  it("one fetch decodes a partition's batches only until they hold the limit: small bombs are not all held at once", async () => {
    // Four zstd batches of 3 x 200 KB (600 KB each, a few KB compressed), one partition's record set of a fetch
    // response (int32 size, then the batches): under a 1 MiB limit the first two are decoded, the rest is left to
    // the next fetch (as a tail cut by maxBytes), which starts at offset 106.
    const batches = await Promise.all(
      [0, 1, 2, 3].map((i) => batch(CompressionTypes.ZSTD, 200_000, 100 + 3 * i)),
    );
    const set = Buffer.concat(batches);
    const e = new Encoder();
    e.writeInt32(set.length);
    e.writeBuffer(set);
    const records = await decodeMessages(new Decoder(e.buffer));
    expect(records.map((r) => r.offset)).toEqual(['100', '101', '102', '103', '104', '105']);
    delete process.env[MAX_DECOMPRESSED_BYTES_SETTING];
    expect(await decodeMessages(new Decoder(e.buffer))).toHaveLength(12);
  });

  it('a snappy-java chunk that is itself a snappy-java stream is refused (kafkajs-snappy would read it nested)', async () => {
    // A chunk starting with the xerial magic: kafkajs-snappy reads it as a nested stream whose chunks each make as
    // many zero bytes as they declare, though as raw snappy it declares 10,626 bytes with exact elements.
    const magic = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00, 0, 0, 0, 1, 0, 0, 0, 1]);
    const nested = Buffer.alloc(10_616);
    magic.copy(nested);
    nested.writeUInt32BE(11, 16);
    Buffer.from([0x80, 0x80, 0x40, 0x18]).copy(nested, 20); // declares 1 MiB, then a snappyjs literal
    nested[27] = 0xf8; // as raw snappy: one literal of 10,585 bytes
    nested.writeUIntLE(10_584, 28, 3);
    const size = Buffer.alloc(4);
    size.writeUInt32BE(nested.length);
    const { out } = await decodeMeasured(CompressionTypes.Snappy, Buffer.concat([magic, size, nested]));
    expect(out).toBeInstanceOf(UndecodableBatchError);
    expect((out as Error).message).toContain('malformed snappy framing');
  });

  it('a zstd frame without a content size whose many small blocks would each slide a large window is refused', async () => {
    // No content size, a 128 MiB window, 20,000 raw blocks of one byte: fzstd moved its whole window after every
    // block (about 10 ms each here), though the output is 20 KB.
    const blocks = Array.from({ length: 20_000 }, (_, i) =>
      Buffer.from([i === 19_999 ? 0x09 : 0x08, 0, 0, 0x41]),
    );
    const frame = Buffer.concat([Buffer.from([0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x88]), ...blocks]);
    delete process.env[MAX_DECOMPRESSED_BYTES_SETTING];
    const { out } = await decodeMeasured(CompressionTypes.ZSTD, frame);
    expect(out).toBeInstanceOf(UndecodableBatchError);
    expect((out as Error).message).toContain('window');
  });

  it('a batch counting more records than the limit can hold parsed is one stand-in, whatever the count', async () => {
    // A real zstd batch whose header says 1,500,000 records (over the 1,000,000 stand-ins a batch may have): one
    // stand-in record, without decompressing, instead of a failed fetch.
    const bytes = Buffer.from(await batch(CompressionTypes.ZSTD));
    bytes.writeInt32BE(1_500_000, RECORDS_START - 4);
    const { records } = await decode(bytes);
    expect(records).toHaveLength(1);
    expect(undecodableAt(records)?.batch.reason).toContain(
      '1500000 records parse to more than 150000000 bytes',
    );
  });

  it('a limit that is not a positive integer is refused by name, not taken as no limit', () => {
    process.env[MAX_DECOMPRESSED_BYTES_SETTING] = 'lots';
    expect(() => maxDecompressedBytes()).toThrow(MAX_DECOMPRESSED_BYTES_SETTING);
  });
});
