import { readFileSync } from 'node:fs';
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
