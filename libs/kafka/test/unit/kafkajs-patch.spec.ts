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
