import fc from 'fast-check';
import { Partitioners, type PartitionMetadata } from 'kafkajs';
import { JavaCompatiblePartitioner, keyPartition, murmur2 } from '../../src';

// kafkajs's own hash (Java-compatible since kafkajs#358): the reference these tests compare against.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const kafkajsMurmur2 = require('kafkajs/src/producer/partitioners/default/murmur2') as (
  key: string | Buffer,
) => number;

const metadata = (n: number, leaderless: number[] = []): PartitionMetadata[] =>
  Array.from({ length: n }, (_, partitionId) => ({
    partitionErrorCode: 0,
    partitionId,
    leader: leaderless.includes(partitionId) ? -1 : 0,
    replicas: [0],
    isr: [0],
  }));

describe('the Java-compatible partitioner', () => {
  it("hashes Kafka's own murmur2 test vectors to the Java client's values", () => {
    // org.apache.kafka.common.utils.UtilsTest#testMurmur2
    const vectors: Array<[string, number]> = [
      ['21', -973932308],
      ['foobar', -790332482],
      ['a-little-bit-long-string', -985981536],
      ['a-little-bit-longer-string', -1486304829],
      ['lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8', -58897971],
      ['abc', 479470107],
    ];
    for (const [key, hash] of vectors) expect(murmur2(key)).toBe(hash);
  });

  it("puts every key, as text (any Unicode, lone surrogates, longer than its scratch buffer) or bytes, where kafkajs's DefaultPartitioner does", () => {
    const kafkajs = Partitioners.DefaultPartitioner();
    const ours = JavaCompatiblePartitioner();
    fc.assert(
      fc.property(
        fc.oneof(
          { arbitrary: fc.string({ unit: 'binary', maxLength: 80 }), weight: 20 },
          { arbitrary: fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b)), weight: 20 },
          { arbitrary: fc.string({ unit: 'grapheme', minLength: 1000, maxLength: 1400 }), weight: 1 },
        ),
        fc.integer({ min: 1, max: 500 }),
        (key, n) => {
          expect(murmur2(key)).toBe(kafkajsMurmur2(key));
          const args = { topic: 't', partitionMetadata: metadata(n), message: { key, value: null } };
          expect(ours(args)).toBe(kafkajs(args));
          expect(keyPartition(key, n)).toBe(kafkajs(args));
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('places a key that is neither text nor a Buffer (a number, a Uint8Array) by the text kafkajs writes for it', () => {
    const kafkajs = Partitioners.DefaultPartitioner();
    const ours = JavaCompatiblePartitioner();
    for (const key of [42, -7.5, new Uint8Array([1, 2, 3]), true]) {
      const args = { topic: 't', partitionMetadata: metadata(12), message: { key, value: null } } as never;
      expect(ours(args)).toBe(kafkajs(args));
      expect(murmur2(key as never)).toBe(murmur2(String(key)));
    }
  });

  it("keeps a record's own partition, and spreads keyless records round robin over the partitions with a leader", () => {
    const p = JavaCompatiblePartitioner();
    expect(
      p({ topic: 't', partitionMetadata: metadata(6), message: { key: 'k', value: null, partition: 4 } }),
    ).toBe(4);
    const seen = new Map<number, number>();
    const withLeader = metadata(6, [1, 4]);
    for (let i = 0; i < 400; i++) {
      const q = p({ topic: 't', partitionMetadata: withLeader, message: { value: 'v' } });
      seen.set(q, (seen.get(q) ?? 0) + 1);
    }
    expect([...seen.keys()].sort()).toEqual([0, 2, 3, 5]);
    expect([...seen.values()]).toEqual([100, 100, 100, 100]);
    // No partition has a leader (a broker restarting): still a valid partition, as kafkajs.
    const q = p({ topic: 't', partitionMetadata: metadata(3, [0, 1, 2]), message: { value: 'v' } });
    expect(q).toBeGreaterThanOrEqual(0);
    expect(q).toBeLessThan(3);
  });
});
