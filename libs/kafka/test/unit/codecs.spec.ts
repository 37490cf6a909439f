import { CompressionCodecs, CompressionTypes, KafkaJSNotImplemented } from 'kafkajs';
import {
  KAFKA_CODEC_IDS,
  UNDECODABLE_HEADER,
  UndecodableBatchError,
  undecodableAt,
  registerCompressionCodecs,
  ZstdCompressionError,
  ZSTD_WASM_MAX_INPUT_BYTES,
} from '../../src';
import * as zlib from 'node:zlib';

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
/* eslint-enable @typescript-eslint/no-require-imports */

registerCompressionCodecs();

const ATTRIBUTES_LOW_BYTE = 22; // record batch v2: attributes int16 at byte 21
const RECORDS_START = 61; // record batch v2 header length: the compressed records follow it
const BASE_OFFSET = 100;

async function batch(compression: CompressionTypes): Promise<Buffer> {
  const records = [0, 1, 2].map((i) =>
    Record({ offsetDelta: i, key: Buffer.from(`k${i}`), value: Buffer.alloc(300, i) }),
  );
  const b = await RecordBatch({
    compression,
    firstOffset: Long.fromValue(BASE_OFFSET),
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

  it('zstd batches are written on every Node (node:zlib or the WebAssembly build) and read back', async () => {
    const { records } = await decode(await batch(CompressionTypes.ZSTD));
    expect(records).toHaveLength(3);
  });

  it('the WebAssembly zstd build refuses an input over its bound with a non-retryable error instead of overrunning its heap', async () => {
    const over = Buffer.alloc(ZSTD_WASM_MAX_INPUT_BYTES + 1);
    const zstd = CompressionCodecs[CompressionTypes.ZSTD]();
    const result = await zstd.compress({ buffer: over } as never).catch((e: unknown) => e);
    if ('zstdCompress' in zlib)
      expect(Buffer.isBuffer(result)).toBe(true); // node:zlib has no such bound
    else {
      expect(result).toBeInstanceOf(ZstdCompressionError);
      expect(result).toMatchObject({ code: 'ZSTD_COMPRESSION_FAILED', retryable: false });
    }
  });

  it("corrupt compressed bytes decode to stand-ins at the batch's last offset naming the codec, offsets and reason, never a failed fetch", async () => {
    const bytes = Buffer.from(await batch(CompressionTypes.LZ4));
    bytes.fill(0xab, RECORDS_START + 4, RECORDS_START + 40); // inside the LZ4 frame, past its magic number
    const { records } = await decode(bytes);
    // kafkajs's decoder reads as many records as the batch header counts: one stand-in each, none before the fetch
    // offset could be (the broker returns a batch only when its last offset is at or past the fetch offset).
    expect(records.map((r) => [r.offset, r.key, r.value])).toEqual([
      ['102', null, null],
      ['102', null, null],
      ['102', null, null],
    ]);
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
