import { Kafka, logLevel, type Producer } from 'kafkajs';
import { Command } from 'commander';
import { sendWithOffsets, TRANSACTIONAL_RETRY } from '@keyflow/kafka';
import { pct, benchTopics, runBench } from './support';

/**
 * What one consume-transform-produce commit costs on this stack, by how its requests go (`npm run
 * bench:transaction`): back-to-back transactions of one record and one offset commit on one transactional producer,
 * in blocks that alternate two ways of sending them, so both are measured in the same sitting:
 *  - `sequential`: sendBatch, then sendOffsets, then commit (kafkajs's idiom, bench/chain.ts and the relay);
 *  - `overlapped`: sendWithOffsets (the engine's commit.ts), then commit: the offsets' TxnOffsetCommit overlaps the
 *    produce (libs/kafka/src/client/kafkajs-patch.ts, "coordinator one at a time").
 * Prints p50 / p90 / p99 per transaction in ms, from transaction() to commit() resolved. Back to back (the default),
 * most transactions meet the previous one's markers still being written and wait a CONCURRENT_TRANSACTIONS retry
 * (kafkajs retries it inside the send, after --first-retry-ms; in `overlapped`, a refused AddOffsetsToTxn is sent again
 * by whileTransactionsConcurrent, whose first wait is TRANSACTIONAL_RETRY's whatever the flag); --gap-ms 20 measures
 * transactions that do not.
 */
const opts = new Command()
  .option('--transactions <n>', 'transactions per way', '3000')
  .option('--block <n>', 'transactions per block before switching ways', '100')
  .option('--gap-ms <n>', 'pause between transactions (0: back to back)', '0')
  .option(
    '--first-retry-ms <n>',
    "the producer's first retry wait (TRANSACTIONAL_RETRY.initialRetryTime: what a CONCURRENT_TRANSACTIONS refusal costs)",
    String(TRANSACTIONAL_RETRY.initialRetryTime),
  )
  .option('--in-flight <n>', "the producer's maxInFlightRequests per connection (the engine's: 1)", '1')
  .parse()
  .opts<{ transactions: string; block: string; gapMs: string; firstRetryMs: string; inFlight: string }>();

const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');

async function main() {
  const kafka = new Kafka({ brokers, clientId: 'bench-transaction', logLevel: logLevel.NOTHING });
  const tag = benchTopics(`bench-tx-${Date.now()}`);
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ waitForLeaders: true, topics: [{ topic: tag, numPartitions: 1 }] });
  await admin.disconnect();
  const producer: Producer = kafka.producer({
    transactionalId: tag,
    idempotent: true,
    maxInFlightRequests: Number(opts.inFlight),
    retry: { ...TRANSACTIONAL_RETRY, initialRetryTime: Number(opts.firstRetryMs) },
  });
  await producer.connect();
  const value = Buffer.alloc(200, 1);
  let offset = 0;
  const one = async (overlapped: boolean): Promise<number> => {
    const t0 = performance.now();
    const tx = await producer.transaction();
    const send = () => tx.sendBatch({ acks: -1, topicMessages: [{ topic: tag, messages: [{ value }] }] });
    const offsets = () =>
      tx.sendOffsets({
        consumerGroupId: tag,
        topics: [{ topic: tag, partitions: [{ partition: 0, offset: String(++offset) }] }],
      });
    if (overlapped) await sendWithOffsets([send], offsets);
    else {
      await send();
      await offsets();
    }
    await tx.commit();
    return performance.now() - t0;
  };
  const n = Number(opts.transactions);
  const block = Number(opts.block);
  const gap = Number(opts.gapMs);
  const took = { sequential: [] as number[], overlapped: [] as number[] };
  for (let i = 0; i < 20; i++) await one(i % 2 === 0); // warm-up
  for (let done = 0; done < 2 * n; done += block) {
    const way = (done / block) % 2 === 0 ? 'sequential' : 'overlapped';
    for (let i = 0; i < block; i++) {
      took[way].push(await one(way === 'overlapped'));
      if (gap > 0) await new Promise((r) => setTimeout(r, gap));
    }
  }
  await producer.disconnect();
  for (const [way, ms] of Object.entries(took)) {
    ms.sort((a, b) => a - b);
    const f = (q: number) => pct(ms, q).toFixed(2);
    console.log(
      `${way.padEnd(10)} ${ms.length} transactions: p50 ${f(50)} ms, p90 ${f(90)} ms, p99 ${f(99)} ms`,
    );
  }
}

runBench(main);
