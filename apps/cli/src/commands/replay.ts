import { Command, InvalidArgumentError, Option } from 'commander';
import { lastStableOffsets, resumePosition, scanRanges, type CheckedCommand } from '@keyflow/ops';
import { rerunVerdict } from '@keyflow/workflow';
import type { CliContext } from '../context';
import { CliConfigError, CliError } from '../context';
import { opt } from '../options';
import { print, table, terminalSafe } from '../output';
import { RerunCheck } from '../rerun-check';
import { Topic, type LogicalTopic } from '@keyflow/schemas';

/** One partition's move in a replay plan. Offsets are Kafka offsets (strings); counts are records. */
export interface ReplayMove {
  /** Logical name (without the topic prefix; the physical name when it has none). */
  topic: string;
  physical: string;
  partition: number;
  /** The group's committed offset now, or null when it has none (its consumers then start at the earliest). */
  from: string | null;
  to: string;
  /** Records a read_committed consumer is given again (between `to` and the group's position). */
  records: number;
  /** Records the group would never read (a move forward, past its position). */
  skipped: number;
  /** Task topics: re-delivered commands that find a stored result or fence (re-published, not re-run)... */
  stored?: number;
  /** ...and those no record answers but whose run still awaits them (the engine's view, with the API): they run. */
  awaited?: number;
  /**
   * ...and those that find no record (expired, lost, or a crashed worker's lease) and nothing awaiting them (libs/workflow
   * rerunVerdict, the check `dlq redrive` applies too): their handlers run again.
   */
  rerun?: number;
  /** Why, for the first few of those (naming the run, its status and why). */
  rerunReasons?: string[];
  /** ...and those no schema decodes (they go to the DLQ again; no effect). */
  undecodable?: number;
  /** wf.requests: re-delivered starts, retries, signals and cancels, which the orchestrator applies again. */
  requests?: number;
}

export interface ReplayPlan {
  group: string;
  mode: string;
  members: Array<{ memberId: string; clientId: string; host: string }>;
  moves: ReplayMove[];
  applied: boolean;
}

/** A replay that may not be applied: live members, skipped records, re-run effects or re-applied requests. */
export class ReplayRefusedError extends CliError {
  constructor(message: string) {
    super('REPLAY_REFUSED', message);
  }
}

const isTaskTopic = (logical: string) =>
  logical.startsWith('task.') && logical !== Topic.TASK_RESULTS && !logical.endsWith('.dlq');
/** wf.requests events the orchestrator applies again when re-delivered (a TimerFired of a gone timer is stale). */
const REAPPLIED_REQUESTS = new Set(['StartRun', 'RetryRun', 'SignalRun', 'CancelRun']);

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

/** Where a replay moves the group's offsets. */
type ReplayTarget = { kind: 'earliest' } | { kind: 'offset'; offset: bigint } | { kind: 'time'; at: number };

/** A range of one move to read: records between the new offset and the group's position (`back`: read again). */
interface ReplayRange {
  move: ReplayMove;
  from: bigint;
  to: bigint;
  back: boolean;
}

/**
 * The plan: for each partition of the group's topics (or `topics`), where its offset goes and what lies between the
 * group's position and there: records read again (a move back) or never read (a move forward). Re-delivered task
 * commands are checked as `dlq redrive` checks them (libs/workflow rerunVerdict, through {@link RerunCheck}): a
 * stored result in the workers' Redis (REDIS_URL) is re-published without running the handler; without one, a command
 * whose run still awaits it (the orchestrator's API, when KEYFLOW_API_URL is set) runs, any other runs again.
 * Re-delivered wf.requests starts, retries, signals and cancels are counted: the orchestrator applies them again.
 */
export async function planReplay(
  ctx: CliContext,
  group: string,
  target: ReplayTarget,
  only: { topics?: string[]; partitions?: number[] },
): Promise<ReplayMove[]> {
  const { moves, ranges } = await movesOf(ctx, group, target, only);
  const check = checksFor(ctx, moves);
  try {
    await countRanges(ctx, ranges, check);
  } finally {
    check?.close();
  }
  return moves;
}

/** Each partition's move (from the group's committed offset to the target, clamped) and the range it reads. */
async function movesOf(
  ctx: CliContext,
  group: string,
  target: ReplayTarget,
  only: { topics?: string[]; partitions?: number[] },
): Promise<{ moves: ReplayMove[]; ranges: ReplayRange[] }> {
  const admin = ctx.kafka.admin();
  await admin.connect();
  const moves: ReplayMove[] = [];
  const ranges: ReplayRange[] = [];
  try {
    const physical = only.topics?.map((t) => ctx.physical(t));
    const committed = await admin.fetchOffsets({ groupId: group, topics: physical });
    for (const { topic, partitions } of committed) {
      if (!physical && partitions.every((p) => p.offset === '-1')) continue;
      const ends = new Map((await lastStableOffsets(ctx.kafka, topic, admin)).map((e) => [e.partition, e]));
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
        const clamp = (o: bigint) => (o < e.low ? e.low : o > e.end ? e.end : o);
        const to = clamp(
          target.kind === 'earliest'
            ? e.low
            : target.kind === 'offset'
              ? target.offset
              : byTime!.get(partition)!,
        );
        const position = resumePosition(offset, e);
        const move: ReplayMove = {
          topic: ctx.logical(topic) ?? topic,
          physical: topic,
          partition,
          from: offset === '-1' ? null : offset,
          to: String(to),
          records: 0,
          skipped: 0,
        };
        moves.push(move);
        if (to < position) ranges.push({ move, from: to, to: position, back: true });
        if (to > position) ranges.push({ move, from: position, to, back: false });
      }
    }
  } finally {
    await admin.disconnect();
  }
  return { moves, ranges };
}

/**
 * Readies the counters of the moves of task topics and wf.requests, the codec for their topics and, for task topics,
 * the rerun check (its caller closes it).
 * @throws CliConfigError without SCHEMA_REGISTRY_URL (or REDIS_URL for task topics) when there are such moves
 */
function checksFor(ctx: CliContext, moves: ReplayMove[]): RerunCheck | undefined {
  const taskMoves = moves.filter((m) => isTaskTopic(m.topic));
  const requestMoves = moves.filter((m) => m.topic === Topic.WF_REQUESTS);
  let check: RerunCheck | undefined;
  if (taskMoves.length || requestMoves.length) {
    if (!ctx.codec)
      throw new CliConfigError('SCHEMA_REGISTRY_URL is not set: task commands and requests must be decoded');
    ctx.codec.useTopics([...new Set([...taskMoves, ...requestMoves].map((m) => m.topic as LogicalTopic))]);
  }
  if (taskMoves.length) {
    if (!ctx.env.REDIS_URL)
      throw new CliConfigError(
        "REDIS_URL is not set: a replay of task topics looks up each command's completion record",
      );
    check = new RerunCheck(ctx, { redis: true });
    taskMoves.forEach((m) =>
      Object.assign(m, { stored: 0, awaited: 0, rerun: 0, undecodable: 0, rerunReasons: [] }),
    );
  }
  requestMoves.forEach((m) => (m.requests = 0));
  return check;
}

/** Reads the ranges and counts, per move, the records read again or never read and what re-reading them does. */
async function countRanges(
  ctx: CliContext,
  ranges: ReplayRange[],
  check: RerunCheck | undefined,
): Promise<void> {
  const byRange = new Map(ranges.map((r) => [`${r.move.physical}\u0000${r.move.partition}`, r]));
  await scanRanges(
    ctx.kafka,
    ranges.map((r) => ({ topic: r.move.physical, partition: r.move.partition, from: r.from, to: r.to })),
    async (topic, partition, message) => {
      const { move: m, back } = byRange.get(`${topic}\u0000${partition}`)!;
      if (!back) {
        m.skipped++;
        return;
      }
      m.records++;
      if (m.requests === undefined && m.stored === undefined) return;
      let d;
      try {
        d = await ctx.codec!.decode(m.topic as LogicalTopic, message.value, {
          topic,
          partition,
          offset: message.offset,
        });
      } catch {
        if (m.undecodable !== undefined) m.undecodable++;
        return;
      }
      if (m.requests !== undefined) {
        if (REAPPLIED_REQUESTS.has(d.event)) m.requests++;
        return;
      }
      const cmd = d.value as unknown as CheckedCommand;
      if (!cmd.idempotencyKey) return;
      const ageMs = Math.max(0, Date.now() - Number(message.timestamp));
      countVerdict(m, rerunVerdict(cmd, await check!.facts(cmd, ageMs)));
    },
    { groupPrefix: 'keyflow-scan' },
  );
}

/** Counts one re-delivered task command's verdict on its move (stored, awaited, or run again with the reason). */
function countVerdict(m: ReplayMove, verdict: ReturnType<typeof rerunVerdict>): void {
  if (verdict.safe && verdict.effect === 'republished') m.stored!++;
  else if (verdict.safe) m.awaited!++;
  else {
    m.rerun!++;
    if (m.rerunReasons!.length < 3) m.rerunReasons!.push(verdict.reason);
  }
}

/** `keyflow replay <group>`: moves a stopped consumer group's offsets, with a dry run of what it changes. */
export function replayCommand(ctx: CliContext): Command {
  return new Command('replay')
    .description(
      'move a consumer group to the earliest offset, an offset or a time, for all or some topics and partitions ' +
        '(the group must have no live members); --dry-run prints the plan',
    )
    .argument('<group>', 'consumer group id')
    .addOption(new Option('--to-earliest', 'to the earliest offset').conflicts(['toOffset', 'toTime']))
    .addOption(
      new Option('--to-offset <n>', 'to this offset (clamped to the partition)')
        .argParser(opt.offset)
        .conflicts(['toTime']),
    )
    .option(
      '--to-time <time>',
      'to the first offset at or after this time (ms, ISO-8601, or 15m/2h/7d ago)',
      opt.time,
    )
    .option('--topic <topic...>', 'only these topics (logical names)')
    .option('--partition <p...>', 'only these partitions', (v: string, prev: number[] = []) => [
      ...prev,
      opt.nonNegative(v),
    ])
    .option('--dry-run', 'print the plan; change nothing')
    .option('--wait <ms>', 'wait up to this long for the group to have no live members', opt.nonNegative, 0)
    .option(
      '--allow-rerun',
      'apply even when task commands would run their handlers again (no stored result)',
    )
    .option('--allow-skip', 'apply even when the move goes forward, past records the group has not read')
    .option(
      '--allow-requests',
      'apply even when wf.requests starts, retries, signals or cancels would be applied again',
    )
    .option('--json', 'JSON output')
    .action((group: string, o: ReplayOptions) => replay(ctx, group, o));
}

/** The options of `keyflow replay`, as commander parses them. */
interface ReplayOptions {
  toEarliest?: boolean;
  toOffset?: bigint;
  toTime?: number;
  topic?: string[];
  partition?: number[];
  dryRun?: boolean;
  wait: number;
  allowRerun?: boolean;
  allowSkip?: boolean;
  allowRequests?: boolean;
  json?: boolean;
}

/** `keyflow replay`'s action: plans the move, refuses an unsafe one (unless allowed), applies it, prints the plan. */
async function replay(ctx: CliContext, group: string, o: ReplayOptions): Promise<void> {
  const target = targetOf(o);
  const only = { topics: o.topic, partitions: o.partition };
  const mode =
    target.kind === 'time'
      ? `to ${new Date(target.at).toISOString()}`
      : target.kind === 'offset'
        ? `to offset ${target.offset}`
        : 'to earliest';
  const live = await liveMembers(ctx, group, o);
  const plan: ReplayPlan = {
    group,
    mode,
    members: live,
    moves: await planReplay(ctx, group, target, only),
    applied: false,
  };
  if (!o.dryRun) {
    refuseUnsafe(plan, o);
    await applyPlan(ctx, plan);
    plan.applied = true;
  }
  print(plan, o.json, (p) => planText(p, Boolean(o.dryRun)));
}

/** Where the options say to move. @throws InvalidArgumentError when they say nowhere */
function targetOf(o: ReplayOptions): ReplayTarget {
  const target = o.toEarliest
    ? ({ kind: 'earliest' } as const)
    : o.toOffset !== undefined
      ? ({ kind: 'offset', offset: o.toOffset } as const)
      : o.toTime !== undefined
        ? ({ kind: 'time', at: o.toTime } as const)
        : undefined;
  if (!target)
    throw new InvalidArgumentError('say where to: --to-earliest, --to-offset <n> or --to-time <time>');
  return target;
}

/**
 * The group's live members, after waiting up to `o.wait` ms for them to leave (not on a dry run). Kafka moves the
 * offsets only of a group with no members (admin setOffsets refuses otherwise): they must stop first.
 */
async function liveMembers(ctx: CliContext, group: string, o: ReplayOptions) {
  const deadline = Date.now() + o.wait;
  let live = await members(ctx, group);
  while (live.length && Date.now() < deadline && !o.dryRun) {
    process.stderr.write(
      terminalSafe(`waiting for ${live.length} live member(s) of ${group} to leave...`) + '\n',
    );
    await new Promise((r) => setTimeout(r, 1_000));
    live = await members(ctx, group);
  }
  return live;
}

/** @throws ReplayRefusedError for live members, or records skipped, run again or re-applied that `o` does not allow */
function refuseUnsafe(plan: ReplayPlan, o: ReplayOptions): void {
  const { group, members: live } = plan;
  const sum = (k: 'skipped' | 'rerun' | 'requests') => plan.moves.reduce((n, m) => n + (m[k] ?? 0), 0);
  if (live.length)
    throw new ReplayRefusedError(
      `group ${group} has ${live.length} live member(s): ${live.map((m) => `${m.clientId}@${m.host}`).join(', ')}. ` +
        'Kafka only moves the offsets of a group with no members: stop them (SIGTERM the services of this group; ' +
        'they leave it as they stop), or pass --wait <ms>',
    );
  if (sum('skipped') > 0 && !o.allowSkip)
    throw new ReplayRefusedError(
      `the move goes forward past ${sum('skipped')} record(s) the group has not read: they would never be processed. ` +
        'Pass --allow-skip to accept that; --dry-run shows where',
    );
  if (sum('rerun') > 0 && !o.allowRerun)
    throw new ReplayRefusedError(
      `${sum('rerun')} command(s) in the range have no stored result (expired, lost, or a crashed worker's lease) ` +
        'and nothing awaiting them: their handlers would run again ' +
        `(${plan.moves
          .flatMap((m) => m.rerunReasons ?? [])
          .slice(0, 3)
          .join('; ')}). ` +
        'Pass --allow-rerun to accept that; --dry-run shows where',
    );
  if (sum('requests') > 0 && !o.allowRequests)
    throw new ReplayRefusedError(
      `${sum('requests')} wf.requests start(s), retries, signals or cancels would be applied again (a start of a run ` +
        'forgotten after its retention starts it again; a retry re-runs steps). Pass --allow-requests to accept that',
    );
}

/** Moves the group's offsets as the plan says (admin setOffsets, one call per topic). */
async function applyPlan(ctx: CliContext, plan: ReplayPlan): Promise<void> {
  const admin = ctx.kafka.admin();
  await admin.connect();
  try {
    for (const physical of new Set(plan.moves.map((m) => m.physical)))
      await admin.setOffsets({
        groupId: plan.group,
        topic: physical,
        partitions: plan.moves
          .filter((m) => m.physical === physical)
          .map((m) => ({ partition: m.partition, offset: m.to })),
      });
  } finally {
    await admin.disconnect();
  }
}

/** The plan as `keyflow replay` prints it: a head line, a table of the moves, the live members. */
function planText(p: ReplayPlan, dryRun: boolean): string {
  return [
    `replay of ${p.group} ${p.mode}${p.applied ? ': applied' : dryRun ? ' (dry run: nothing changed)' : ''}`,
    table(
      p.moves.map((m) => ({
        topic: m.topic,
        partition: m.partition,
        from: m.from,
        to: m.to,
        're-delivered': m.records,
        'never read': m.skipped || '',
        'stored results (re-published)': m.stored ?? '',
        'awaited (run)': m.awaited || '',
        'run again': m.rerun ?? '',
        'requests applied again': m.requests ?? '',
      })),
    ),
    ...(p.members.length
      ? [`live members: ${p.members.map((m) => `${m.clientId}@${m.host} (${m.memberId})`).join(', ')}`]
      : []),
  ].join('\n');
}
