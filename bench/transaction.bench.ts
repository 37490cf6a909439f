import { Kafka, logLevel, type Producer } from 'kafkajs';
import { Command } from 'commander';
import { sendWithOffsets, TRANSACTIONAL_RETRY } from '@keyflow/kafka';
import { pct, benchTopics, runBench } from './support';
import { TransactionV2Producer } from './transaction-v2';

/**
 * What one consume-transform-produce commit costs on this stack, by how its requests go (`npm run
 * bench:transaction`): back-to-back transactions of one record and one offset commit on one transactional producer,
 * in blocks that alternate two ways of sending them, so both are measured in the same sitting:
 *  - `sequential`: sendBatch, then sendOffsets, then commit (kafkajs's idiom, bench/chain.ts and the relay);
 *  - `overlapped`: sendWithOffsets, then commit: the offsets' TxnOffsetCommit overlaps the produce
 *    (libs/kafka/src/client/kafkajs-patch.ts, "coordinator one at a time"). The engine sent its offsets so until
 *    2026-12-06; it now sends them when it opens a batch's transaction, before the apply (commit.ts openBatch),
 *    which a commit with nothing to apply between cannot show.
 * Prints p50 / p90 / p99 per transaction in ms, from transaction() to commit() resolved. Back to back (the default),
 * most transactions meet the previous one's markers still being written and wait a CONCURRENT_TRANSACTIONS retry
 * (kafkajs retries it inside the send, after --first-retry-ms; in `overlapped`, a refused AddOffsetsToTxn is sent again
 * by whileTransactionsConcurrent, whose first wait is TRANSACTIONAL_RETRY's whatever the flag); --gap-ms 20 measures
 * transactions that do not. With --v2 the blocks alternate `sequential` with `v2`: the same transaction through
 * Kafka's transaction protocol version 2 (KIP-890 part 2; bench/transaction-v2.ts, a client of this bench only, which
 * kafkajs 2.2.4 cannot be: Produce v12, TxnOffsetCommit v5 and EndTxn v5 are flexible versions), without
 * AddPartitionsToTxn and AddOffsetsToTxn. It needs the cluster's `transaction.version` at 2 (the local stack's is).
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
  .option('--v2', 'alternate kafkajs (sequential) with transaction protocol version 2 instead of overlapped')
  .parse()
  .opts<{
    transactions: string;
    block: string;
    gapMs: string;
    firstRetryMs: string;
    inFlight: string;
    v2?: boolean;
  }>();

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
  // The version-2 producer has its own transactional id and group: the two ways never share a transaction's state.
  const v2 = opts.v2
    ? await TransactionV2Producer.create({
        kafka,
        transactionalId: `${tag}-v2`,
        topic: tag,
        groupId: `${tag}-v2`,
        retryMs: Number(opts.firstRetryMs),
      })
    : undefined;
  let offsetV2 = 0;
  const oneV2 = async (): Promise<number> => {
    const t0 = performance.now();
    await v2!.transaction(tag, value, `${tag}-v2`, ++offsetV2);
    return performance.now() - t0;
  };
  const other = v2 ? 'v2' : 'overlapped';
  const run = (way: string) => (way === 'v2' ? oneV2() : one(way === 'overlapped'));
  const n = Number(opts.transactions);
  const block = Number(opts.block);
  const gap = Number(opts.gapMs);
  const took: Record<string, number[]> = { sequential: [], [other]: [] };
  for (let i = 0; i < 20; i++) await run(i % 2 === 0 ? 'sequential' : other); // warm-up
  for (let done = 0; done < 2 * n; done += block) {
    const way = (done / block) % 2 === 0 ? 'sequential' : other;
    for (let i = 0; i < block; i++) {
      took[way].push(await run(way));
      if (gap > 0) await new Promise((r) => setTimeout(r, gap));
    }
  }
  await producer.disconnect();
  v2?.close();
  if (v2)
    console.log(
      `v2: ${v2.retries} requests sent again after a refusal (CONCURRENT_TRANSACTIONS, a coordinator loading or moving); producer epoch now ${v2.producerEpoch()}`,
    );
  for (const [way, ms] of Object.entries(took)) {
    ms.sort((a, b) => a - b);
    const f = (q: number) => pct(ms, q).toFixed(2);
    console.log(
      `${way.padEnd(10)} ${ms.length} transactions: p50 ${f(50)} ms, p90 ${f(90)} ms, p99 ${f(99)} ms`,
    );
  }
}

runBench(main);
