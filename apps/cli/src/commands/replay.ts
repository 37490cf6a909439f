import { Command, InvalidArgumentError, Option } from 'commander';
import { Redis } from 'ioredis';
import { IdempotencyStore, idempotencyKeyPrefix, type RecordState } from '@keyflow/idempotency';
import { lastStableOffsets, scanRanges } from '@keyflow/kafka';
import type { CliContext } from '../context';
import { CliConfigError } from '../context';
import { opt } from '../options';
import { print, table } from '../output';

/** One partition's move in a replay plan. Offsets are Kafka offsets (strings). */
export interface ReplayMove {
  topic: string;
  partition: number;
  /** The group's committed offset now, or null when it has none. */
  from: string | null;
  to: string;
  /** Records a read_committed consumer is given between `to` and `from` (re-delivered by the replay). */
  records: number;
  /** Task topics only: of those commands, how many find a stored result or fence (re-published, not re-run)... */
  stored?: number;
  /** ...and how many find no record (expired or lost): their handlers would run again. */
  rerun?: number;
  /** ...and how many find a lease (a worker runs them now). */
  running?: number;
}

export interface ReplayPlan {
  group: string;
  mode: string;
  members: Array<{ memberId: string; clientId: string; host: string }>;
  moves: ReplayMove[];
  applied: boolean;
}

/** A replay that may not be applied: live members, or effects that would run again without --allow-rerun. */
export class ReplayRefusedError extends Error {
  readonly code = 'REPLAY_REFUSED';
  readonly retryable = false;
  constructor(message: string) {
    super(message);
    this.name = 'ReplayRefusedError';
  }
}

const isTaskTopic = (logical: string) =>
  logical.startsWith('task.') && logical !== 'task.results' && !logical.endsWith('.dlq');

async function members(ctx: CliContext, group: string) {
  const admin = ctx.kafka.admin();
  await admin.connect();
  try {
    const [g] = (await admin.describeGroups([group])).groups;
    return g.members.map((m) => ({ memberId: m.memberId, clientId: m.clientId, host: m.clientHost }));
  } finally {
    await admin.disconnect();
  }
}

/**
 * The plan: for each partition of the group's topics (or `topics`), where its offset goes, and what the records in
 * between are. For task topics each command's idempotency key is looked up in the workers' Redis (REDIS_URL): a
 * stored result is re-published without running the handler, a missing record runs it again.
 */
export async function planReplay(
  ctx: CliContext,
  group: string,
  target: { kind: 'earliest' } | { kind: 'offset'; offset: bigint } | { kind: 'time'; at: number },
  only: { topics?: string[]; partitions?: number[] },
): Promise<ReplayMove[]> {
  const admin = ctx.kafka.admin();
  await admin.connect();
  const moves: ReplayMove[] = [];
  try {
    const physical = only.topics?.map((t) => ctx.physical(t));
    const committed = await admin.fetchOffsets({ groupId: group, topics: physical });
    for (const { topic, partitions } of committed) {
      if (!physical && partitions.every((p) => p.offset === '-1')) continue;
      const ends = new Map((await lastStableOffsets(ctx.kafka, topic)).map((e) => [e.partition, e]));
      const byTime =
        target.kind === 'time'
          ? new Map(
              (await admin.fetchTopicOffsetsByTimestamp(topic, target.at)).map((o) => [
                o.partition,
                BigInt(o.offset),
              ]),
            )
          : undefined;
      for (const { partition, offset } of partitions) {
        if (only.partitions && !only.partitions.includes(partition)) continue;
        const e = ends.get(partition)!;
        let to =
          target.kind === 'earliest'
            ? e.low
            : target.kind === 'offset'
              ? target.offset
              : byTime!.get(partition)!;
        if (to < e.low) to = e.low;
        if (to > e.end) to = e.end;
        moves.push({
          topic: ctx.logical(topic) ?? topic,
          partition,
          from: offset === '-1' ? null : offset,
          to: String(to),
          records: 0,
        });
      }
    }
  } finally {
    await admin.disconnect();
  }
  // What the re-delivered ranges hold: records between the new offset and the committed one.
  const byRange = new Map(moves.map((m) => [`${ctx.physical(m.topic)}\u0000${m.partition}`, m]));
  const ranges = moves
    .filter((m) => m.from !== null && BigInt(m.from) > BigInt(m.to))
    .map((m) => ({
      topic: ctx.physical(m.topic),
      partition: m.partition,
      from: BigInt(m.to),
      to: BigInt(m.from!),
    }));
  const taskMoves = moves.filter((m) => isTaskTopic(m.topic));
  let store: IdempotencyStore | undefined;
  let redis: Redis | undefined;
  if (taskMoves.length) {
    if (!process.env.REDIS_URL)
      throw new CliConfigError(
        "REDIS_URL is not set: a replay of task topics looks up each command's completion record",
      );
    redis = new Redis(process.env.REDIS_URL, { maxRetriesPerRequest: 2, lazyConnect: true });
    store = new IdempotencyStore(redis, { keyPrefix: idempotencyKeyPrefix(ctx.env.KEYFLOW_TOPIC_PREFIX) });
    taskMoves.forEach((m) => Object.assign(m, { stored: 0, rerun: 0, running: 0 }));
    if (!ctx.codec) throw new CliConfigError('SCHEMA_REGISTRY_URL is not set: task commands must be decoded');
    ctx.codec.useTopics([...new Set(taskMoves.map((m) => m.topic))]);
  }
  const kinds: Record<RecordState, 'stored' | 'rerun' | 'running'> = {
    completed: 'stored',
    failed: 'stored',
    fenced: 'stored',
    running: 'running',
    absent: 'rerun',
  };
  try {
    await scanRanges(
      ctx.kafka,
      ranges,
      async (topic, partition, message) => {
        const m = byRange.get(`${topic}\u0000${partition}`)!;
        m.records++;
        if (!store || !isTaskTopic(m.topic)) return;
        const d = await ctx.codec!.decode(m.topic, message.value, {
          topic,
          partition,
          offset: message.offset,
        });
        const key = (d.value as { idempotencyKey?: string }).idempotencyKey;
        if (key) m[kinds[await store.peek(key)]]! += 1;
      },
      { groupPrefix: 'keyflow-scan' },
    );
  } finally {
    redis?.disconnect();
  }
  return moves;
}

/** `keyflow replay <group>`: moves a stopped consumer group's offsets back, with a dry run of what it re-delivers. */
export function replayCommand(ctx: CliContext): Command {
  return new Command('replay')
    .description(
      'move a consumer group to the earliest offset, an offset or a time, for all or some topics and partitions ' +
        '(the group must have no live members); --dry-run prints the plan',
    )
    .argument('<group>', 'consumer group id')
    .addOption(new Option('--to-earliest', 'to the earliest offset').conflicts(['toOffset', 'toTime']))
    .addOption(
      new Option('--to-offset <n>', 'to this offset (clamped to the partition)').conflicts(['toTime']),
    )
    .option(
      '--to-time <time>',
      'to the first offset at or after this time (ms, ISO-8601, or 15m/2h/7d ago)',
      opt.time,
    )
    .option('--topic <topic...>', 'only these topics (logical names)')
    .option('--partition <p...>', 'only these partitions')
    .option('--dry-run', 'print the plan; change nothing')
    .option('--wait <ms>', 'wait up to this long for the group to have no live members', opt.positive, 0)
    .option('--allow-rerun', 'apply even when commands would run their handlers again (no stored result)')
    .option('--json', 'JSON output')
    .action(async (group: string, o) => {
      const target = o.toEarliest
        ? ({ kind: 'earliest' } as const)
        : o.toOffset !== undefined
          ? ({ kind: 'offset', offset: BigInt(o.toOffset) } as const)
          : o.toTime !== undefined
            ? ({ kind: 'time', at: o.toTime as number } as const)
            : undefined;
      if (!target)
        throw new InvalidArgumentError('say where to: --to-earliest, --to-offset <n> or --to-time <time>');
      const only = {
        topics: o.topic as string[] | undefined,
        partitions: (o.partition as string[] | undefined)?.map(Number),
      };
      const mode =
        target.kind === 'time'
          ? `to ${new Date(target.at).toISOString()}`
          : target.kind === 'offset'
            ? `to offset ${target.offset}`
            : 'to earliest';
      // Kafka refuses offset changes for a group with live members (OffsetCommit: UNKNOWN_MEMBER_ID / the group is
      // not empty): they must stop first. Wait for that, or name them.
      const deadline = Date.now() + Number(o.wait);
      let live = await members(ctx, group);
      while (live.length && Date.now() < deadline && !o.dryRun) {
        process.stderr.write(`waiting for ${live.length} live member(s) of ${group} to leave...\n`);
        await new Promise((r) => setTimeout(r, 1_000));
        live = await members(ctx, group);
      }
      const plan: ReplayPlan = {
        group,
        mode,
        members: live,
        moves: await planReplay(ctx, group, target, only),
        applied: false,
      };
      const rerun = plan.moves.reduce((n, m) => n + (m.rerun ?? 0), 0);
      const human = (p: ReplayPlan) =>
        [
          `replay of ${p.group} ${p.mode}${p.applied ? ': applied' : o.dryRun ? ' (dry run: nothing changed)' : ''}`,
          table(
            p.moves.map((m) => ({
              topic: m.topic,
              partition: m.partition,
              from: m.from,
              to: m.to,
              're-delivered': m.records,
              'stored results (re-published)': m.stored ?? '',
              'run again': m.rerun ?? '',
            })),
          ),
          ...(p.members.length
            ? [`live members: ${p.members.map((m) => `${m.clientId}@${m.host} (${m.memberId})`).join(', ')}`]
            : []),
        ].join('\n');
      if (!o.dryRun) {
        if (live.length)
          throw new ReplayRefusedError(
            `group ${group} has ${live.length} live member(s): ${live.map((m) => `${m.clientId}@${m.host}`).join(', ')}. ` +
              'Kafka only moves the offsets of a group with no members: stop them (SIGTERM the services of this group; ' +
              'they leave it as they stop), or pass --wait <ms>',
          );
        if (rerun > 0 && !o.allowRerun)
          throw new ReplayRefusedError(
            `${rerun} command(s) in the range have no stored result (expired or lost): their handlers would run again. ` +
              'Pass --allow-rerun to accept that; --dry-run shows where',
          );
        const admin = ctx.kafka.admin();
        await admin.connect();
        try {
          for (const topic of new Set(plan.moves.map((m) => m.topic)))
            await admin.setOffsets({
              groupId: group,
              topic: ctx.physical(topic),
              partitions: plan.moves
                .filter((m) => m.topic === topic)
                .map((m) => ({ partition: m.partition, offset: m.to })),
            });
        } finally {
          await admin.disconnect();
        }
        plan.applied = true;
      }
      print(plan, o.json, human);
    });
}
