import { randomUUID } from 'node:crypto';
import { Bench } from 'tinybench';
import { produceRequestEncoder } from '@keyflow/testing/kafkajs-encoders';

/**
 * What kafkajs spends writing a produce request before it goes on the socket (records, record batch with its CRC-32C,
 * compression, framing), through the kafkajs this workspace runs (patches/kafkajs+2.2.4.patch applied) next to the
 * same kafkajs 2.2.4 unpatched (the `kafkajs-pristine` alias in package.json), in the same run. Three shapes of an
 * engine transaction's request: 20 records (one run's inputs at low load) and 500 records (a burst) uncompressed, and
 * the 500 gzipped (a request of 64 KiB or more is compressed, KEYFLOW_COMPRESSION). Records: a 36-character key, a
 * 0.4-2 KB value, a traceparent header on every other one. No broker: encoding only.
 *   npm run bench:produce-encode
 */
const clients = {
  patched: produceRequestEncoder('kafkajs'),
  unpatched: produceRequestEncoder('kafkajs-pristine'),
};

function messages(n: number) {
  return Array.from({ length: n }, (_, i) => ({
    key: randomUUID(),
    value: Buffer.from(JSON.stringify({ i, text: 'x'.repeat(400 + (i % 5) * 400) })),
    headers: i % 2 ? { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01` } : {},
    timestamp: String(Date.now()),
  }));
}

async function main() {
  const shapes = [
    { name: '20 records', records: messages(20), compression: 0 },
    { name: '500 records', records: messages(500), compression: 0 },
    { name: '500 records, gzip', records: messages(500), compression: 1 },
  ];
  const bench = new Bench({ time: Number(process.env.BENCH_TIME_MS ?? 2000) });
  for (const shape of shapes)
    for (const [client, encode] of Object.entries(clients))
      bench.add(`${shape.name}, ${client}`, async () => {
        const topicData = [
          { topic: 'wf.state', partitions: [{ partition: 0, firstSequence: 0, messages: shape.records }] },
        ];
        await encode(topicData, shape.compression, 'bench-tx', 'bench');
      });
  await bench.run();
  const us = (name: string) => 1e6 / (bench.tasks.find((t) => t.name === name)?.result?.hz ?? NaN);
  console.table(
    shapes.map((s) => ({
      request: s.name,
      'patched, us/record': (us(`${s.name}, patched`) / s.records.length).toFixed(2),
      'unpatched, us/record': (us(`${s.name}, unpatched`) / s.records.length).toFixed(2),
      'patched / unpatched time': (us(`${s.name}, patched`) / us(`${s.name}, unpatched`)).toFixed(2),
    })),
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
