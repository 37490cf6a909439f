import { Command } from 'commander';
import { groupLag, SCAN_GROUP_PREFIXES, type PartitionLag } from '@keyflow/ops';
import type { CliContext } from '../context';
import { opt } from '../options';
import { duration, print, table } from '../output';

/** The consumer groups of the cluster, without the short-lived ones the CLI's own scans use. */
export async function listGroups(ctx: CliContext) {
  const admin = ctx.kafka.admin();
  await admin.connect();
  try {
    const ids = (await admin.listGroups()).groups
      .map((g) => g.groupId)
      .filter((id) => !SCAN_GROUP_PREFIXES.some((p) => id.startsWith(`${p}-`)))
      .sort();
    if (!ids.length) return [];
    const { groups } = await admin.describeGroups(ids);
    return groups.map((g) => ({
      group: g.groupId,
      state: g.state,
      members: g.members.length,
      clients: [...new Set(g.members.map((m) => `${m.clientId}@${m.clientHost}`))].join(', '),
    }));
  } finally {
    await admin.disconnect();
  }
}

/** `keyflow groups ...`: consumer groups and their lag. */
export function groupsCommand(ctx: CliContext): Command {
  const groups = new Command('groups').description(
    'consumer groups: members, and lag as a read_committed consumer sees it',
  );
  groups
    .command('ls')
    .description('consumer groups with their state and live members')
    .option('--json', 'JSON output')
    .action(async (o) => print(await listGroups(ctx), o.json, (rows) => table(rows)));
  groups
    .command('lag [groups...]')
    .description(
      'lag per group, topic and partition: records still to read up to the last stable offset, transaction markers ' +
        "and aborted records not counted (Kafka's tools count them), and the oldest unread record's age",
    )
    .option(
      '--exact-up-to <n>',
      'count records exactly when a partition is at most this far behind',
      opt.positive,
      10_000,
    )
    .option('--all', 'list partitions with no lag too')
    .option('--json', 'JSON output')
    .action(async (names: string[], o) => {
      const ids = names.length ? names : (await listGroups(ctx)).map((g) => g.group);
      const out: Array<PartitionLag & { group: string }> = [];
      for (const group of ids)
        for (const lag of await groupLag(ctx.kafka, group, { exactUpTo: o.exactUpTo }))
          out.push({ group, ...lag, topic: ctx.logical(lag.topic) ?? lag.topic });
      print(out, o.json, (rows) => {
        const shown = o.all ? rows : rows.filter((r) => r.lag > 0);
        const totals = ids.map((g) => {
          const mine = rows.filter((r) => r.group === g);
          return `${g}: lag ${mine.reduce((n, r) => n + r.lag, 0)}${mine.some((r) => !r.exact) ? ' (at most)' : ''} over ${mine.length} partitions`;
        });
        return [
          table(
            shown.map((r) => ({
              group: r.group,
              topic: r.topic,
              partition: r.partition,
              committed: r.committed,
              end: r.end,
              lag: r.exact ? r.lag : `<=${r.lag}`,
              'oldest unread': duration(r.oldestAgeMs),
            })),
          ),
          '',
          ...totals,
        ].join('\n');
      });
    });
  return groups;
}
