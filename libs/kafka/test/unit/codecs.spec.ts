import { CompressionTypes, KafkaJSNotImplemented } from 'kafkajs';
import {
  KAFKA_CODEC_IDS,
  UndecodableBatchError,
  ZstdCompressionUnavailableError,
  canCompressZstd,
  registerCompressionCodecs,
} from '../../src';

// kafkajs's own record batch encoder and decoder (message format v2), as its producer and fetch path use them.
/* eslint-disable @typescript-eslint/no-require-imports */
const { RecordBatch } = require('kafkajs/src/protocol/recordBatch/v0') as {
  RecordBatch: (b: object) => Promise<{ buffer: Buffer }>;
};
const Record = require('kafkajs/src/protocol/recordBatch/record/v0') as (r: object) => unknown;
const decodeBatch = require('kafkajs/src/protocol/recordBatch/v0/decoder') as (
  d: unknown,
) => Promise<{ records: Array<{ key: Buffer; value: Buffer; offset: string }> }>;
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

  it('zstd compression works where node:zlib has zstd, and otherwise fails with a code naming the codec', async () => {
    if (canCompressZstd()) {
      const { records } = await decode(await batch(CompressionTypes.ZSTD));
      expect(records).toHaveLength(3);
    } else {
      const err = await batch(CompressionTypes.ZSTD).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ZstdCompressionUnavailableError);
      expect(err).toMatchObject({ code: 'ZSTD_COMPRESSION_UNAVAILABLE', retryable: false });
      expect((err as Error).message).toContain(`codec id ${KAFKA_CODEC_IDS.zstd}`);
    }
  });

  it('corrupt compressed bytes fail with UNDECODABLE_BATCH naming the codec and offsets, which kafkajs does not retry', async () => {
    const bytes = Buffer.from(await batch(CompressionTypes.LZ4));
    bytes.fill(0xab, RECORDS_START + 4, RECORDS_START + 40); // inside the LZ4 frame, past its magic number
    const err = await decode(bytes).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UndecodableBatchError);
    expect(err).toMatchObject({
      code: 'UNDECODABLE_BATCH',
      retryable: false,
      codecId: KAFKA_CODEC_IDS.lz4,
      batch: { baseOffset: '100', lastOffset: '102', records: 3 },
    });
    // What kafkajs 2.2.4's runner bails on without retrying, and its onCrash does not restart on.
    expect(err).toBeInstanceOf(KafkaJSNotImplemented);
    expect(err).toMatchObject({ name: 'KafkaJSNotImplemented', retriable: false });
  });

  it('a batch with a codec id Kafka does not define (5-7) fails with UNDECODABLE_BATCH instead of being parsed as records', async () => {
    const bytes = Buffer.from(await batch(CompressionTypes.GZIP));
    bytes[ATTRIBUTES_LOW_BYTE] = (bytes[ATTRIBUTES_LOW_BYTE] & ~0x07) | 5;
    const err = await decode(bytes).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'UNDECODABLE_BATCH', codecId: 5, batch: { baseOffset: '100' } });
  });
});
