import { Command } from 'commander';
import { createIdempotentProducer } from '@keyflow/kafka';
import {
  handledBy,
  listDlqTopics,
  NOT_OWN_SOURCE,
  readDlqLedger,
  REPORT_RECORDS_MAX,
  readDlqRecords,
  redrive,
  rerunAdmission,
  summarizeDlqs,
  type DlqSummary,
  type RedriveReport,
  type RedriveFilter,
} from '@keyflow/ops';
import { CliError, type CliContext } from '../context';
import { opt } from '../options';
import { iso, print, table } from '../output';
import { RerunCheck } from '../rerun-check';

/**
 * Every DLQ topic of this deployment (the catalog's `*.dlq` under the topic prefix: libs/ops isCatalogDlq), summed up
 * against the DLQ ledger, with logical names.
 */
export async function dlqSummaries(ctx: CliContext): Promise<DlqSummary[]> {
  const topics = await listDlqTopics(ctx.kafka, ctx.env.KEYFLOW_TOPIC_PREFIX);
  const handled = await readDlqLedger(ctx.kafka, ctx.requireCodec());
  return (await summarizeDlqs(ctx.kafka, topics, { handled })).map((s) => ({
    ...s,
    topic: ctx.logical(s.topic)!,
  }));
}

/** The physical name of a DLQ topic given by its logical name. @throws CliError DLQ_NOT_FOUND when there is none */
async function dlqTopic(ctx: CliContext, logical: string): Promise<string> {
  const physical = ctx.physical(logical);
  if (!(await listDlqTopics(ctx.kafka, ctx.env.KEYFLOW_TOPIC_PREFIX)).includes(physical))
    throw new CliError('DLQ_NOT_FOUND', `no DLQ topic ${logical} (keyflow dlq ls lists them)`);
  return physical;
}

/** The filter options every DLQ subcommand that selects records takes. */
function withFilter(c: Command): Command {
  return c
    .option('--partition <n>', 'only records of this DLQ partition', opt.nonNegative)
    .option('--offset <offset>', 'only the record at this offset (with --partition: one record)', opt.offset)
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
  partition: o.partition as number | undefined,
  offset: o.offset === undefined ? undefined : String(o.offset),
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
  addLs(dlq, ctx);
  addShow(dlq, ctx);
  for (const [name, action] of [
    ['redrive', 'REDRIVEN'],
    ['discard', 'DISCARDED'],
  ] as const)
    addRedrive(dlq, ctx, name, action);
  return dlq;
}

/** `keyflow dlq ls`: every DLQ topic with its counts and top error classes. */
function addLs(dlq: Command, ctx: CliContext): void {
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
            pending: s.pending,
            'oldest pending': iso(s.oldest),
            'newest pending': iso(s.newest),
            'top errors': s.topErrors.map((e) => `${e.errorClass} (${e.count})`).join(', '),
          })),
        ),
      );
    });
}

/** `keyflow dlq show <topic>`: records of one DLQ topic with their triage headers and decoded values. */
function addShow(dlq: Command, ctx: CliContext): void {
  withFilter(dlq.command('show <topic>'))
    .description('records of one DLQ topic with their triage headers and decoded values')
    .option('--limit <n>', 'records at most', opt.positive, 20)
    .option('--pending', 'only records not yet redriven or discarded')
    .option('--json', 'JSON output')
    .action(async (topic: string, o) => {
      const codec = ctx.requireCodec();
      const found = await readDlqRecords(ctx.kafka, await dlqTopic(ctx, topic), {
        limit: o.limit,
        filter: filterOf(o),
        pendingOnly: Boolean(o.pending),
        codec,
        handled: await readDlqLedger(ctx.kafka, codec),
      });
      print(found, o.json, (rows) => rows.map((r) => recordText(topic, r)).join('\n\n') || '(none)');
    });
}

/** The text of one DLQ record `keyflow dlq show` prints: where it is from, its triage headers, state and value. */
function recordText(topic: string, r: Awaited<ReturnType<typeof readDlqRecords>>[number]): string {
  return (
    `${topic} ${r.partition}@${r.offset}  key ${r.key ?? '-'}  from ${r.originalTopic ?? '-'} ${r.originalPartition ?? '-'}@${r.originalOffset ?? '-'}\n` +
    `  ${r.errorClass}: ${r.errorMessage}  (attempts ${r.attempts ?? '-'}, last failure ${iso(r.lastFailureAt)}, group ${r.consumerGroup ?? '-'}, host ${r.host ?? '-'}${r.redriveCount ? `, dead-lettered again after ${r.redriveCount} redrive(s)` : ''})\n` +
    `  ${r.handled ? `${r.handled.action.toLowerCase()} by ${r.handled.handledBy} at ${iso(r.handled.at)}` : 'pending'}\n` +
    `  ${r.omitted ? `stand-in: ${r.omitted}` : JSON.stringify(r.value).slice(0, 2_000)}`
  );
}

/** `keyflow dlq redrive <topic>` (action REDRIVEN) or `keyflow dlq discard <topic>` (DISCARDED). */
function addRedrive(
  dlq: Command,
  ctx: CliContext,
  name: 'redrive' | 'discard',
  action: 'REDRIVEN' | 'DISCARDED',
): void {
  withFilter(dlq.command(`${name} <topic>`))
    .description(
      action === 'REDRIVEN'
        ? 're-publish matching pending records to their original topic (key, bytes and idempotency key kept)'
        : 'mark matching pending records as handled without re-publishing them',
    )
    .option('--rate <n>', 'records per second at most', opt.positive, 100)
    .option(
      '--allow-rerun',
      'also redrive task commands nothing awaits (their run ended or was compensated, their step moved on, or ' +
        "their run's status is unknown): their handlers run again",
    )
    .option('--api <url>', "the orchestrator's API, asked for each run's status (default: KEYFLOW_API_URL)")
    .option('--include-handled', 'also act on records redriven or discarded before')
    .option('--reason <text>', 'why, recorded in the DLQ ledger')
    .option('--dry-run', 'count what would be acted on; send nothing')
    .option('--json', 'JSON output')
    .action(async (topic: string, o) => {
      const codec = ctx.requireCodec();
      // Task commands are checked as `keyflow replay` checks them (libs/workflow rerunVerdict): the run's status from
      // the orchestrator's API, the worker's record in Redis, the record's age against the completion TTL.
      const check =
        action === 'REDRIVEN' && !o.allowRerun ? new RerunCheck(ctx, { redis: true, api: o.api }) : undefined;
      const producer = createIdempotentProducer(ctx.kafka);
      await producer.connect();
      try {
        const report = await redrive(ctx.kafka, {
          admit: check
            ? rerunAdmission(codec, (cmd, ageMs, need) => check.facts(cmd, ageMs, need))
            : undefined,
          dlqTopic: await dlqTopic(ctx, topic),
          filter: filterOf(o),
          ratePerSec: o.rate,
          producer,
          logger: ctx.logger,
          dryRun: Boolean(o.dryRun),
          action,
          includeHandled: Boolean(o.includeHandled),
          ledger: { codec, handledBy: handledBy('keyflow-cli'), reason: o.reason },
        });
        // Records left pending because their topic refuses them or the redrive refused them: not a clean run, for
        // scripts too.
        if (report.tooLarge > 0 || report.refused > 0) process.exitCode = 2;
        print(report, o.json, (r) => redriveText(ctx, name, r));
      } finally {
        check?.close();
        await producer.disconnect();
      }
    });
}

/** The text `keyflow dlq redrive|discard` prints of a redrive report: counts, topics, records, refusals. */
function redriveText(ctx: CliContext, name: 'redrive' | 'discard', r: RedriveReport): string {
  return [
    `${r.dryRun ? `would be ${name === 'redrive' ? 'redriven' : 'discarded'}` : name === 'redrive' ? 'redriven' : 'discarded'}: ` +
      `${r.moved} of ${r.scanned} records (${r.skipped} did not match, ${r.alreadyHandled} handled before` +
      (r.noOriginalTopic ? `, ${r.noOriginalTopic} without an original topic: discard them` : '') +
      (r.tooLarge
        ? `, ${r.tooLarge} too large for their original topic: left pending, raise its max.message.bytes`
        : '') +
      (r.omitted
        ? `, ${r.omitted} stand-ins without their value (too large for the DLQ): left pending, discard them`
        : '') +
      ')',
    ...Object.entries(r.byTopic).map(([t, n]) => `  -> ${ctx.logical(t) ?? t}: ${n}`),
    ...r.redriven.map(
      (x) => `  ${r.dryRun ? 'would redrive' : 'redrove'} ${x.partition}@${x.offset} key ${x.key ?? '-'}`,
    ),
    ...(r.refused
      ? [
          `refused: ${r.refused} (left pending${r.refusals.some((x) => x.code !== NOT_OWN_SOURCE) ? '; --allow-rerun redrives task commands nothing awaits, running their handlers again' : ''})`,
          ...r.refusals.map(
            (x) => `  ${x.partition}@${x.offset} key ${x.key ?? '-'}: ${x.code}: ${x.reason}`,
          ),
        ]
      : []),
    ...((r.action === 'REDRIVEN' && r.moved > r.redriven.length) || r.refused > r.refusals.length
      ? [`(lists cut at ${REPORT_RECORDS_MAX} records each: --json has the same lists)`]
      : []),
  ].join('\n');
}
