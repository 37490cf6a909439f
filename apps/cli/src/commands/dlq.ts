import { Command } from 'commander';
import type { KafkaMessage } from 'kafkajs';
import {
  createIdempotentProducer,
  DLQ_HEADERS,
  header,
  lastStableOffsets,
  listDlqTopics,
  matchesRedriveFilter,
  redrive,
  scanRanges,
  summarizeDlqs,
  type DlqSummary,
  type RedriveFilter,
} from '@keyflow/kafka';
import type { CliContext } from '../context';
import { opt } from '../options';
import { iso, print, table } from '../output';

/** Every DLQ topic (`*.dlq` under the topic prefix), summed up, with logical names. */
export async function dlqSummaries(ctx: CliContext): Promise<DlqSummary[]> {
  const topics = await listDlqTopics(ctx.kafka, ctx.env.KEYFLOW_TOPIC_PREFIX);
  return (await summarizeDlqs(ctx.kafka, topics)).map((s) => ({ ...s, topic: ctx.logical(s.topic)! }));
}

/** A DLQ record as `dlq show` prints it: triage headers, key, and the value decoded with its original topic's schema. */
export interface DlqRecord {
  partition: number;
  offset: string;
  key: string | null;
  originalTopic: string | null;
  originalPartition: number | null;
  originalOffset: string | null;
  errorClass: string | null;
  errorMessage: string | null;
  attempts: number | null;
  firstFailureAt: number | null;
  lastFailureAt: number | null;
  consumerGroup: string | null;
  host: string | null;
  redriveCount: number;
  /** The decoded event ({ event, value }), or the bytes as UTF-8 text when no schema decodes them. */
  value: unknown;
}

async function describe(
  ctx: CliContext,
  topic: string,
  partition: number,
  m: KafkaMessage,
): Promise<DlqRecord> {
  const h = (n: string) => header(m.headers, n) ?? null;
  const num = (v: string | null) => (v === null ? null : Number(v));
  const original = h(DLQ_HEADERS.originalTopic);
  let value: unknown = m.value?.toString('utf8') ?? null;
  const logical = original ? ctx.logical(original) : undefined;
  if (ctx.codec && logical && m.value)
    value = await Promise.resolve()
      .then(() => ctx.codec!.useTopics([logical]))
      .then(() => ctx.codec!.decode(logical, m.value, { topic, partition, offset: m.offset }))
      .then((d) => ({ event: d.event, value: d.value }))
      .catch((err: Error) => ({ undecodable: err.message, text: m.value!.toString('utf8').slice(0, 2_000) }));
  return {
    partition,
    offset: m.offset,
    key: m.key?.toString() ?? null,
    originalTopic: original,
    originalPartition: num(h(DLQ_HEADERS.originalPartition)),
    originalOffset: h(DLQ_HEADERS.originalOffset),
    errorClass: h(DLQ_HEADERS.errorClass),
    errorMessage: h(DLQ_HEADERS.errorMessage),
    attempts: num(h(DLQ_HEADERS.attempts)),
    firstFailureAt: num(h(DLQ_HEADERS.firstFailureAt)),
    lastFailureAt: num(h(DLQ_HEADERS.lastFailureAt)),
    consumerGroup: h(DLQ_HEADERS.consumerGroup),
    host: h(DLQ_HEADERS.host),
    redriveCount: Number(h(DLQ_HEADERS.redriveCount) ?? 0),
    value,
  };
}

/** The filter options every DLQ subcommand that selects records takes. */
function withFilter(c: Command): Command {
  return c
    .option('--key <key>', 'only records with this key')
    .option('--error-class <name>', 'only records with this error class')
    .option(
      '--from <time>',
      'only records whose last failure is at or after (ms, ISO-8601, or 15m/2h/7d ago)',
      opt.time,
    )
    .option('--to <time>', 'only records whose last failure is before', opt.time);
}
const filterOf = (o: Record<string, unknown>): RedriveFilter => ({
  key: o.key as string | undefined,
  errorClass: o.errorClass as string | undefined,
  fromMs: o.from as number | undefined,
  toMs: o.to as number | undefined,
});

/** `keyflow dlq ...`: dead-letter topics. Topic arguments are logical names (`task.etl.load.dlq`). */
export function dlqCommand(ctx: CliContext): Command {
  const dlq = new Command('dlq').description(
    'dead-letter topics: counts, records with triage headers, redrive',
  );
  dlq
    .command('ls')
    .description('every DLQ topic: records, oldest and newest failure, top error classes')
    .option('--json', 'JSON output')
    .action(async (o) => {
      print(await dlqSummaries(ctx), o.json, (rows) =>
        table(
          rows.map((s) => ({
            topic: s.topic,
            records: s.records,
            oldest: iso(s.oldest),
            newest: iso(s.newest),
            'top errors': s.topErrors.map((e) => `${e.errorClass} (${e.count})`).join(', '),
          })),
        ),
      );
    });
  withFilter(dlq.command('show <topic>'))
    .description('records of one DLQ topic with their triage headers and decoded values')
    .option('--limit <n>', 'records at most', opt.positive, 20)
    .option('--json', 'JSON output')
    .action(async (topic: string, o) => {
      const physical = ctx.physical(topic);
      const ranges = (await lastStableOffsets(ctx.kafka, physical)).map((e) => ({
        topic: physical,
        partition: e.partition,
        from: e.low,
        to: e.end,
      }));
      const found: DlqRecord[] = [];
      const filter = filterOf(o);
      await scanRanges(ctx.kafka, ranges, async (t, partition, m) => {
        if (found.length >= o.limit) return false;
        if (matchesRedriveFilter(m, filter)) found.push(await describe(ctx, t, partition, m));
      });
      print(
        found,
        o.json,
        (rows) =>
          rows
            .map(
              (r) =>
                `${topic} ${r.partition}@${r.offset}  key ${r.key ?? '-'}  from ${r.originalTopic ?? '-'} ${r.originalPartition ?? '-'}@${r.originalOffset ?? '-'}\n` +
                `  ${r.errorClass}: ${r.errorMessage}  (attempts ${r.attempts ?? '-'}, last failure ${iso(r.lastFailureAt)}, group ${r.consumerGroup ?? '-'}, host ${r.host ?? '-'}, redriven ${r.redriveCount}x)\n` +
                `  ${JSON.stringify(r.value).slice(0, 2_000)}`,
            )
            .join('\n\n') || '(none)',
      );
    });
  withFilter(dlq.command('redrive <topic>'))
    .description('re-publish matching records to their original topic (key, bytes and idempotency key kept)')
    .option('--rate <n>', 'records per second at most', opt.positive, 100)
    .option('--dry-run', 'count what would be redriven; send nothing')
    .option('--json', 'JSON output')
    .action(async (topic: string, o) => {
      const producer = createIdempotentProducer(ctx.kafka);
      await producer.connect();
      try {
        const report = await redrive(ctx.kafka, {
          dlqTopic: ctx.physical(topic),
          filter: filterOf(o),
          ratePerSec: o.rate,
          producer,
          logger: ctx.logger,
          dryRun: Boolean(o.dryRun),
        });
        print(report, o.json, (r) =>
          [
            `${r.dryRun ? 'would redrive' : 'redriven'}: ${r.moved} of ${r.scanned} records (${r.skipped} did not match)`,
            ...Object.entries(r.byTopic).map(([t, n]) => `  -> ${ctx.logical(t) ?? t}: ${n}`),
          ].join('\n'),
        );
      } finally {
        await producer.disconnect();
      }
    });
  return dlq;
}
