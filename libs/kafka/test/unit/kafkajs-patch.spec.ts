import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { assertKafkajsPatched, KAFKAJS_PATCHES } from '../../src';

describe('the kafkajs patch', () => {
  it('is applied to every file of the kafkajs this workspace loads (npm ci runs patch-package)', () => {
    for (const [path, marker] of Object.entries(KAFKAJS_PATCHES))
      expect({
        path,
        patched: readFileSync(require.resolve(`kafkajs/src/${path}`), 'utf8').includes(marker),
      }).toEqual({
        path,
        patched: true,
      });
    expect(() => assertKafkajsPatched()).not.toThrow();
  });

  it("groups a send by partition keeping each partition's messages in send order", () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const group = require('kafkajs/src/producer/groupMessagesPerPartition') as (a: {
      topic: string;
      partitionMetadata: unknown[];
      messages: Array<{ key: string; n: number }>;
      partitioner: (a: { message: { key: string } }) => number;
    }) => Record<string, Array<{ n: number }>>;
    const messages = Array.from({ length: 10_000 }, (_, n) => ({ key: String(n % 7), n }));
    const groups = group({
      topic: 't',
      partitionMetadata: [{}, {}, {}],
      messages,
      partitioner: ({ message }) => Number(message.key) % 3,
    });
    expect(Object.keys(groups).sort()).toEqual(['0', '1', '2']);
    for (const [p, ms] of Object.entries(groups)) {
      const want = messages.filter((m) => Number(m.key) % 3 === Number(p)).map((m) => m.n);
      expect(ms.map((m) => m.n)).toEqual(want);
    }
    expect(group({ topic: 't', partitionMetadata: [], messages, partitioner: () => 0 })).toEqual({});
  });
});

describe('kafkajs encoding a record whose header has a null value (Kafka allows it: KIP-82)', () => {
  it('writes the header with a null value instead of throwing, so such a record can be dead-lettered or redriven', () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const Record = require('kafkajs/src/protocol/recordBatch/record/v0') as (r: {
      key: Buffer | null;
      value: Buffer | null;
      headers: Record<string, Buffer | null>;
    }) => { buffer: Buffer };
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const Decoder = require('kafkajs/src/protocol/decoder') as new (b: Buffer) => unknown;
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const decodeRecord = require('kafkajs/src/protocol/recordBatch/record/v0/decoder') as (
      d: unknown,
      batch: { firstOffset: string; firstTimestamp: string; magicByte: number },
    ) => { headers: Record<string, Buffer | null>; value: Buffer | null };
    const encoded = Record({
      key: Buffer.from('k'),
      value: Buffer.from('v'),
      headers: { absent: null, present: Buffer.from('x') },
    }).buffer;
    // The record's length (one varint byte here) is read by the batch decoder before the record's own decoder.
    const decoded = decodeRecord(new Decoder(encoded.subarray(1)), {
      firstOffset: '0',
      firstTimestamp: '0',
      magicByte: 2,
    });
    expect(decoded.headers).toEqual({ absent: null, present: Buffer.from('x') });
    expect(decoded.value).toEqual(Buffer.from('v'));
  });
});

describe("kafkajs's encoder on buffers from Node's pool (not zero-filled: the 'encoder from the pool' patch)", () => {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const produceRequest = require('kafkajs/src/protocol/requests/produce/v3/request') as (r: {
    acks: number;
    timeout: number;
    compression: number;
    topicData: unknown[];
  }) => { encode: () => Promise<{ buffer: Buffer }> };

  /** The produce request's bytes when every Buffer.allocUnsafe is filled with `fill` first. */
  async function encodedOver(fill: number, topicData: unknown[], compression: number): Promise<Buffer> {
    const unsafe = Buffer.allocUnsafe;
    Buffer.allocUnsafe = (size: number) => Buffer.alloc(size, fill);
    try {
      return Buffer.from(
        (await produceRequest({ acks: -1, timeout: 30_000, compression, topicData }).encode()).buffer,
      );
    } finally {
      Buffer.allocUnsafe = unsafe;
    }
  }

  const text = fc.string({ unit: 'grapheme', maxLength: 40 });
  const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));
  const message = fc.record({
    key: fc.oneof(fc.constant(null), text, bytes(64)),
    // Up to 3 KiB: past the encoder's first 512 bytes, so its growth path is taken too.
    value: fc.oneof(fc.constant(null), text, bytes(3_000)),
    headers: fc.dictionary(
      fc.string({ minLength: 1, maxLength: 12 }),
      fc.oneof(fc.constant(null), text, bytes(40), fc.array(text, { maxLength: 3 })),
      { maxKeys: 4 },
    ),
    timestamp: fc.integer({ min: 0, max: 2 ** 41 }).map(String),
  });
  const topicData = fc.array(
    fc.record({
      topic: fc.string({ minLength: 1, maxLength: 20 }),
      partitions: fc.array(
        fc.record({
          partition: fc.nat(11),
          firstSequence: fc.nat(1_000),
          messages: fc.array(message, { minLength: 1, maxLength: 8 }),
        }),
        { minLength: 1, maxLength: 3 },
      ),
    }),
    { minLength: 1, maxLength: 2 },
  );

  it('every byte of a produce request is written by the encoder: no byte of an earlier use of the memory gets out', async () => {
    await fc.assert(
      fc.asyncProperty(topicData, fc.constantFrom(0, 1), async (data, compression) => {
        const zeros = await encodedOver(0x00, data, compression); // what Buffer.alloc gave before the patch
        expect(await encodedOver(0xaa, data, compression)).toEqual(zeros);
        expect(await encodedOver(0x55, data, compression)).toEqual(zeros);
      }),
      { numRuns: 200 },
    );
  });

  it('writes a varint in place with the bytes of the untouched 64-bit varint writer, for every 32-bit integer', () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const Encoder = require('kafkajs/src/protocol/encoder') as new () => {
      writeVarInt(v: number): { buffer: Buffer };
      writeVarLong(v: number): { buffer: Buffer };
    };
    fc.assert(
      fc.property(
        fc.oneof(fc.integer(), fc.constantFrom(0, -1, 2 ** 31 - 1, -(2 ** 31), 63, 64, -64, -65)),
        (v) => {
          expect(new Encoder().writeVarInt(v).buffer).toEqual(new Encoder().writeVarLong(v).buffer);
        },
      ),
      { numRuns: 2_000 },
    );
  });
});
