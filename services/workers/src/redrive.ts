import { Command, InvalidArgumentError } from 'commander';
import { createIdempotentProducer, createKafka, redrive } from '@keyflow/kafka';
import { createLogger } from '@keyflow/observability';

/**
 * Redrive CLI: re-publishes selected DLQ records to their original topic, keeping key, bytes and headers (so the
 * idempotency key is kept), at a bounded rate, and prints what it moved.
 *   npm run -w @keyflow/workers redrive -- --dlq-topic task.extract.dlq --error-class TaskInputError --rate 50
 * Reads KAFKA_BROKERS (and KEYFLOW_TOPIC_PREFIX, prepended to --dlq-topic).
 */
const int = (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('a positive number');
  return n;
};
const time = (v: string) => {
  const n = /^\d+$/.test(v) ? Number(v) : Date.parse(v);
  if (Number.isNaN(n)) throw new InvalidArgumentError('ms since epoch or an ISO-8601 time');
  return n;
};

const program = new Command('redrive')
  .requiredOption('--dlq-topic <topic>', 'DLQ topic, logical name (e.g. task.extract.dlq)')
  .option('--key <key>', 'only records with this key')
  .option('--error-class <name>', 'only records whose error class is this')
  .option('--from <time>', 'only records whose last failure is at or after this time', time)
  .option('--to <time>', 'only records whose last failure is before this time', time)
  .option('--rate <n>', 'records per second at most', int, 100)
  .parse();

async function main() {
  const o = program.opts<{
    dlqTopic: string;
    key?: string;
    errorClass?: string;
    from?: number;
    to?: number;
    rate: number;
  }>();
  const brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
  if (!brokers.length) throw new Error('KAFKA_BROKERS is not set');
  const logger = createLogger('redrive');
  const kafka = createKafka({ brokers, clientId: 'keyflow-redrive', logger });
  const producer = createIdempotentProducer(kafka);
  await producer.connect();
  try {
    const report = await redrive(kafka, {
      dlqTopic: `${process.env.KEYFLOW_TOPIC_PREFIX ?? ''}${o.dlqTopic}`,
      filter: { key: o.key, errorClass: o.errorClass, fromMs: o.from, toMs: o.to },
      ratePerSec: o.rate,
      producer,
      logger,
    });
    console.log(JSON.stringify(report, null, 2));
  } finally {
    await producer.disconnect();
  }
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
