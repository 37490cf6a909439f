import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { produceRequestEncoder } from '@keyflow/testing/kafkajs-encoders';
import { assertKafkajsPatched, KAFKAJS_PATCHES } from '../../src';

// Any UTF-16 code unit, lone surrogates included (written as U+FFFD, 3 bytes, by Buffer.byteLength and write alike).
const text = fc.string({
  unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
  maxLength: 40,
});
const bytes = (max: number) => fc.uint8Array({ maxLength: max }).map((a) => Buffer.from(a));

/** A produce request's topic data: 1-3 topics of 1-3 partitions of 1-8 messages each. */
function produceTopicData(o: { nullHeaderValues: boolean; maxValueBytes: number }) {
  const headerValue = fc.oneof(text, bytes(40), fc.array(fc.oneof(text, bytes(20)), { maxLength: 3 }));
  const message = fc.record({
    key: fc.oneof(fc.constant(null), text, bytes(64)),
    value: fc.oneof(fc.constant(null), text, bytes(o.maxValueBytes)),
    headers: fc.dictionary(
      fc.string({ minLength: 1, maxLength: 12 }),
      o.nullHeaderValues ? fc.oneof(fc.constant(null), headerValue) : headerValue,
      { maxKeys: 4 },
    ),
    // Timestamps apart by more than 2^30 ms too, so that a record's timestamp delta takes the Long path.
    timestamp: fc.oneof(fc.integer({ min: 0, max: 2 ** 41 }), fc.integer({ min: 0, max: 5_000 })).map(String),
  });
  return fc.array(
    fc.record({
      topic: text.filter((t) => t.length > 0),
      partitions: fc.array(
        fc.record({
          partition: fc.nat(11),
          firstSequence: fc.nat(1_000),
          // At least one message: an empty batch's timestamps are Date.now(), read apart by two encodings.
          messages: fc.array(message, { minLength: 1, maxLength: 8 }),
        }),
        { minLength: 1, maxLength: 3 },
      ),
    }),
    { minLength: 1, maxLength: 3 },
  );
}

/** A kafkajs copy's produce request as it goes on the wire, as a copy of its bytes (see produceRequestEncoder). */
function produceEncoders(root: 'kafkajs' | 'kafkajs-pristine') {
  const encode = produceRequestEncoder(root);
  return async (...args: Parameters<typeof encode>): Promise<Buffer> => Buffer.from(await encode(...args));
}

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

describe("kafkajs's request queue on Node 24 (the 'negative timeout' patch)", () => {
  it('schedules its pending-request check with no negative delay, so Node prints no TimeoutNegativeWarning', async () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const RequestQueue = require('kafkajs/src/network/requestQueue') as new (o: {
      instrumentationEmitter: null;
      maxInFlightRequests: number;
      requestTimeout: number;
      enforceRequestTimeout: boolean;
      clientId: string;
      broker: string;
      logger: { namespace: () => Record<string, () => void> };
    }) => { scheduleCheckPendingRequests(): void; destroy(): void };
    const quiet = () => undefined;
    const queue = new RequestQueue({
      instrumentationEmitter: null,
      maxInFlightRequests: 1,
      requestTimeout: 1000,
      enforceRequestTimeout: false,
      clientId: 'test',
      broker: 'b:9092',
      logger: { namespace: () => ({ debug: quiet, info: quiet, warn: quiet, error: quiet }) },
    });
    const real = global.setTimeout;
    const delays: number[] = [];
    const spy = jest
      .spyOn(global, 'setTimeout')
      .mockImplementation(((f: () => void, ms?: number) => (delays.push(ms ?? 0), real(f, 0))) as never);
    try {
      queue.scheduleCheckPendingRequests(); // not throttled, nothing pending
    } finally {
      spy.mockRestore();
      queue.destroy();
    }
    expect(delays).toHaveLength(1);
    expect(delays[0]).toBeGreaterThanOrEqual(0);
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
  const encoded = produceEncoders('kafkajs');

  /** A whole produce request as it goes on the wire, when every Buffer.allocUnsafe is filled with `fill` first. */
  async function encodedOver(
    fill: number,
    topicData: unknown[],
    compression: number,
    transactionalId: string | null,
  ): Promise<Buffer> {
    const unsafe = Buffer.allocUnsafe;
    Buffer.allocUnsafe = (size: number) => Buffer.alloc(size, fill);
    try {
      return await encoded(topicData, compression, transactionalId, 'keyflow-test');
    } finally {
      Buffer.allocUnsafe = unsafe;
    }
  }

  // Up to 5 KiB: past the encoder's first 512 bytes and past the pool's 4 KiB, so both growth paths are taken.
  const topicData = produceTopicData({ nullHeaderValues: true, maxValueBytes: 5_000 });

  it('every byte of a framed produce request is written by the encoder: no byte of an earlier use of the memory gets out', async () => {
    await fc.assert(
      fc.asyncProperty(
        topicData,
        fc.constantFrom(0, 1),
        fc.oneof(fc.constant(null), text),
        async (data, compression, transactionalId) => {
          const zeros = await encodedOver(0x00, data, compression, transactionalId); // what Buffer.alloc gave before
          expect(await encodedOver(0xaa, data, compression, transactionalId)).toEqual(zeros);
          expect(await encodedOver(0x55, data, compression, transactionalId)).toEqual(zeros);
        },
      ),
      { numRuns: 200 },
    );
    // 200 runs of 3 encodings take 1.5-3 s alone and went past Jest's default 5 s on a loaded 2-core machine (CI's
    // unit suites run in parallel): the property's budget, not a speed target.
  }, 60_000);

  it('writes an unsigned varint in place as the LEB128 of the value taken as an unsigned 32-bit integer, as before', () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const Encoder = require('kafkajs/src/protocol/encoder') as new () => {
      writeUVarInt(v: number): { buffer: Buffer };
      writeVarInt(v: number): { buffer: Buffer };
      writeVarLong(v: number): { buffer: Buffer };
    };
    /** LEB128 of ToUint32(v): what the loop of `&` and `>>>=` computed before the patch, for any number. */
    const leb128 = (v: number): Buffer => {
      const out: number[] = [];
      let u = v >>> 0;
      while (u >= 0x80) {
        out.push((u & 0x7f) | 0x80);
        u = Math.floor(u / 128);
      }
      out.push(u);
      return Buffer.from(out);
    };
    const any = fc.oneof(
      fc.integer(),
      fc.integer({ min: 0, max: 2 ** 32 - 1 }),
      fc.double(),
      fc.constantFrom(
        NaN,
        Infinity,
        -Infinity,
        0,
        -0,
        2 ** 32,
        2 ** 40 + 5,
        -(2 ** 31),
        127,
        128,
        16_383,
        16_384,
      ),
    );
    fc.assert(
      fc.property(any, (v) => {
        expect(new Encoder().writeUVarInt(v).buffer).toEqual(leb128(v));
      }),
      { numRuns: 5_000 },
    );
    // And a signed varint equals the untouched 64-bit writer for 32-bit integers (zigzag of both agree there).
    fc.assert(
      fc.property(fc.integer(), (v) => {
        expect(new Encoder().writeVarInt(v).buffer).toEqual(new Encoder().writeVarLong(v).buffer);
      }),
      { numRuns: 2_000 },
    );
  });
});

describe("kafkajs's produce request written once at its exact size (the 'encoders of known size' patch)", () => {
  // The same kafkajs 2.2.4 as installed from the registry, unpatched (package.json: kafkajs-pristine, an npm alias).
  const patched = produceEncoders('kafkajs');
  const pristine = produceEncoders('kafkajs-pristine');
  /* eslint-disable @typescript-eslint/no-require-imports */
  type VarEncoder = new () => { writeVarLong(v: number): { buffer: Buffer } } & {
    sizeOfVarLong(v: number): number;
  };
  const Encoder = require('kafkajs/src/protocol/encoder') as VarEncoder & {
    sizeOfVarLong(v: number): number;
  };
  const PristineEncoder = require('kafkajs-pristine/src/protocol/encoder') as VarEncoder & {
    sizeOfVarLong(v: number): number;
  };
  const crc32C = require('kafkajs/src/protocol/recordBatch/crc32C/crc32C') as ((b: Buffer) => number) & {
    portable: (b: Buffer) => number;
  };
  // Both sides gzip with the codec '../../src' registered with this workspace's kafkajs (keyflow's, GZIP_LEVEL): the
  // property is about the framing around the compressed bytes, not kafkajs's own codec at its default level.
  type Codecs = Record<number, unknown>;
  (require('kafkajs-pristine') as { CompressionCodecs: Codecs }).CompressionCodecs[1] = (
    require('kafkajs') as { CompressionCodecs: Codecs }
  ).CompressionCodecs[1];
  /* eslint-enable @typescript-eslint/no-require-imports */

  // Header values are never null here: the unpatched kafkajs throws on one (the 'null header value' patch). Values up
  // to 9 KiB: past an encoder's first 512 bytes, the pool's 4 KiB and the pool's 8 KiB slab.
  const topicData = produceTopicData({ nullHeaderValues: false, maxValueBytes: 9_000 });

  it('frames every produce request byte for byte as the unpatched kafkajs 2.2.4, compressed or not', async () => {
    await fc.assert(
      fc.asyncProperty(
        topicData,
        fc.constantFrom(0, 1),
        fc.oneof(fc.constant(null), text),
        fc.oneof(fc.constant(null), text),
        async (data, compression, transactionalId, clientId) => {
          const args = [data, compression, transactionalId, clientId] as const;
          expect(await patched(...args)).toEqual(await pristine(...args));
        },
      ),
      { numRuns: 300 },
    );
    // The property's budget, not a speed target (as above).
  }, 60_000);

  it('writes and sizes every varlong as the unpatched encoder does, on both sides of the in-place bound (2^30)', () => {
    const edge = fc.constantFrom(
      0,
      -1,
      1,
      63,
      64,
      -64,
      -65,
      2 ** 30 - 1,
      2 ** 30,
      -(2 ** 30),
      -(2 ** 30) - 1,
      2 ** 31,
      -(2 ** 31),
      2 ** 40 + 3,
      -(2 ** 45),
      Number.MAX_SAFE_INTEGER,
      Number.MIN_SAFE_INTEGER,
    );
    fc.assert(
      fc.property(fc.oneof(edge, fc.integer(), fc.maxSafeInteger()), (v) => {
        expect(new Encoder().writeVarLong(v).buffer).toEqual(new PristineEncoder().writeVarLong(v).buffer);
        expect(Encoder.sizeOfVarLong(v)).toBe(PristineEncoder.sizeOfVarLong(v));
      }),
      { numRuns: 5_000 },
    );
  });

  it("computes CRC-32C (the record batch's checksum) as kafkajs's byte-at-a-time loop, whatever the native library", () => {
    // The check value of CRC-32C (RFC 3720, appendix B.4: the Castagnoli polynomial over "123456789").
    expect(crc32C(Buffer.from('123456789'))).toBe(0xe3069283);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 70_000 }), fc.nat(15), (a, skip) => {
        // A view that does not start at its ArrayBuffer's start, as the batch body a record batch checksums.
        const b = Buffer.from(a).subarray(Math.min(skip, a.length));
        expect(crc32C(b)).toBe(crc32C.portable(b));
      }),
      { numRuns: 300 },
    );
  });
});
