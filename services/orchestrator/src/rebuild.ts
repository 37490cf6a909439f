import type { Kafka } from '@keyflow/kafka';
import { undecodableBatchError, undecodableBatchOf } from '@keyflow/kafka';
import { PayloadSerde, type EventCodec } from '@keyflow/contracts';
import {
  assembleRunState,
  flatRunState,
  reduceInPlace,
  segmentKey,
  type ItemSegment,
  type ReduceOptions,
  type RunState,
  type WorkflowInput,
} from '@keyflow/workflow';
import type { ClaimCheck } from '@keyflow/blobs';
import { toWorkflowInput } from './engine/mapping';
import { BARRIER_PREFIX } from './engine/read-model';
import type { WorkflowRegistry } from './workflows/registry';
import { Topic, type FixedTopic } from '@keyflow/schemas';

/** One field of one run where the rebuilt state and the live snapshot disagree. */
export interface Difference {
  runId: string;
  field: string;
  live: unknown;
  rebuilt: unknown;
}

export interface RebuildReport {
  inputsRead: number;
  runsRebuilt: number;
  runsLive: number;
  matching: number;
  differences: Difference[];
  /** Runs with inputs but no StartRun left in the topic (retention) and so not rebuildable. */
  unrebuildable: string[];
}

type Raw = { logical: FixedTopic; partition: number; offset: string; value: Buffer | null; topic: string };

/**
 * Reads a topic from the beginning (read_committed) up to its end offsets at the start of the call. Trailing
 * transaction markers occupy offsets no record is delivered for, so a partition also counts as read once nothing
 * new arrived for `idleMs` (default 2 000 ms).
 * @throws UndecodableBatchError (UNDECODABLE_BATCH, naming topic, partition and offsets) when a record batch cannot
 *   be decompressed: a rebuild that silently left out those records would report differences that are not there.
 */
async function readAll(kafka: Kafka, topic: string, logical: FixedTopic, idleMs = 2_000): Promise<Raw[]> {
  const admin = kafka.admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  const pending = new Map(
    ends.filter((e) => BigInt(e.high) > BigInt(e.low)).map((e) => [e.partition, BigInt(e.high)]),
  );
  const out: Raw[] = [];
  if (pending.size === 0) return out;
  const consumer = kafka.consumer({
    groupId: `keyflow-rebuild-${topic}-${Date.now()}-${process.pid}`,
    readUncommitted: false,
    maxWaitTimeInMs: 200,
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let last = Date.now();
  let failed: Error | undefined;
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      last = Date.now();
      const end = pending.get(partition);
      if (end === undefined || BigInt(message.offset) >= end || failed) return;
      const undecodable = undecodableBatchOf(message);
      if (undecodable) {
        failed = undecodableBatchError(topic, partition, undecodable);
        return pending.clear();
      }
      out.push({ logical, topic, partition, offset: message.offset, value: message.value });
      if (BigInt(message.offset) + 1n >= end) pending.delete(partition);
    },
  });
  while (pending.size > 0 && Date.now() - last < idleMs) await new Promise((r) => setTimeout(r, 50));
  await consumer.disconnect();
  if (failed) throw failed;
  return out;
}

function comparable(run: RunState) {
  const s = flatRunState(run); // map items among the steps
  return {
    status: s.status,
    version: s.version,
    plan: s.plan,
    steps: Object.fromEntries(
      Object.entries(s.steps).map(([id, st]) => [
        id,
        { status: st.status, attempt: st.attempt, output: st.output ?? null },
      ]),
    ),
    output: s.output ?? null,
    compensation: s.compensation?.queue ?? null,
  };
}

/** Field-by-field differences between a live snapshot and a rebuilt state (top-level fields of `comparable`). */
export function diffRun(live: RunState, rebuilt: RunState): Difference[] {
  const a = comparable(live);
  const b = comparable(rebuilt);
  return (Object.keys(a) as Array<keyof typeof a>)
    .filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]))
    .map((k) => ({ runId: live.runId, field: k, live: a[k], rebuilt: b[k] }));
}

/**
 * Rebuilds every run's state from the input topics (wf.requests and task.results) with the pure reducer, and
 * compares it with the live snapshots in wf.state.
 *
 * Order and clock: the engine applies inputs in arrival order at its own clock, and every lifecycle event it wrote
 * for an input names that input as its causation id and carries the engine's time (wf.events, one partition per
 * run, in application order). An input that caused events is replayed at its first event's position and time; an
 * input that caused none (ignored, or a signal buffered for later) is placed by its own occurredAt, requests before
 * results at equal times. So a producer's clock skew no longer reorders a run's inputs.
 */
export async function rebuildRuns(
  kafka: Kafka,
  codec: EventCodec,
  registry: WorkflowRegistry,
  /** Reads outputs and snapshot states that came by claim check (without it, such records cannot be compared). */
  claim?: ClaimCheck,
  reduceOptions: ReduceOptions = {},
): Promise<RebuildReport> {
  await codec.registerTopics([Topic.WF_REQUESTS, Topic.TASK_RESULTS, Topic.WF_STATE, Topic.WF_EVENTS]);
  const [requests, results, snapshots, events] = await Promise.all([
    readAll(kafka, codec.physical(Topic.WF_REQUESTS), Topic.WF_REQUESTS),
    readAll(kafka, codec.physical(Topic.TASK_RESULTS), Topic.TASK_RESULTS),
    readAll(kafka, codec.physical(Topic.WF_STATE), Topic.WF_STATE),
    readAll(kafka, codec.physical(Topic.WF_EVENTS), Topic.WF_EVENTS),
  ]);
  const serde = new PayloadSerde(codec, claim);
  const applied = await appliedInputs(serde, events);
  const { perRun, inputsRead } = await inputsByRun(serde, registry, [...requests, ...results], applied);
  const { rebuilt, unrebuildable } = rebuildAll(registry, perRun, reduceOptions);
  const live = await liveRuns(serde, snapshots);
  return {
    inputsRead,
    runsRebuilt: rebuilt.size,
    runsLive: live.size,
    ...compareRuns(live, rebuilt),
    unrebuildable,
  };
}

/** Where and when the engine applied an input: its first lifecycle event (offset in the run's partition, time). */
type Applied = Map<string, { offset: bigint; at: number }>;

/** An input of a run as the rebuild orders it (see {@link rebuildRuns}). */
type RunInput = { input: WorkflowInput; rank: number; offset: bigint; applied: boolean };

/** A record decoded, or undefined when it does not decode (skipped: the engine dead-lettered such inputs too). */
const decodeOrSkip = (serde: PayloadSerde, r: Raw) =>
  serde
    .decode(r.logical, r.value, { topic: r.topic, partition: r.partition, offset: r.offset })
    .catch(() => undefined);

/** Per input event id, where and when the engine applied it: its first lifecycle event on wf.events. */
async function appliedInputs(serde: PayloadSerde, events: Raw[]): Promise<Applied> {
  const applied: Applied = new Map();
  for (const r of events) {
    const d = await decodeOrSkip(serde, r);
    if (!d) continue;
    const cause = d.value.metadata.causationId;
    if (cause && !applied.has(cause))
      applied.set(cause, { offset: BigInt(r.offset), at: d.value.metadata.occurredAt });
  }
  return applied;
}

/**
 * The inputs of each run (claim-checked outputs read back when the serde has a blob store); an applied input takes
 * its first event's position and time. A StartRun's input is checked against its workflow's schema only when the
 * engine did not apply it (then it decided with the definitions of the time).
 */
async function inputsByRun(
  serde: PayloadSerde,
  registry: WorkflowRegistry,
  inputs: Raw[],
  applied: Applied,
): Promise<{ perRun: Map<string, RunInput[]>; inputsRead: number }> {
  const perRun = new Map<string, RunInput[]>();
  let inputsRead = 0;
  for (const r of inputs) {
    const raw = await decodeOrSkip(serde, r);
    if (!raw) continue;
    const d = serde.blobs ? await serde.resolve(raw) : raw;
    const decoded = toWorkflowInput(
      d,
      (name, v) => registry.get(name, v),
      !applied.has(d.value.metadata.eventId),
    );
    if ('invalid' in decoded) continue;
    const when = applied.get(decoded.eventId);
    let input: WorkflowInput = when ? { ...decoded, at: when.at } : decoded;
    if (input.kind === 'timer-fired') {
      // The engine's own decision: a TimerFired it applied with an effect (every effective one emits an event)
      // fires here whatever its dueAt (a deadline a wait report moved was moved at the engine's clock, which the
      // rebuild places at the report's); one that caused nothing (stale, or not applied yet) is left out. Copies of one
      // TimerFired (same eventId: one per timer and due time) are kept side by side: the first ends the timer, the
      // others are stale in the reducer.
      if (!when) continue;
      const { dueAt: _published, ...fires } = input;
      input = fires;
    }
    inputsRead++;
    perRun.set(input.runId, [
      ...(perRun.get(input.runId) ?? []),
      {
        input,
        rank: r.logical === Topic.WF_REQUESTS ? 0 : 1,
        offset: when ? when.offset : BigInt(r.offset),
        applied: when !== undefined,
      },
    ]);
  }
  return { perRun, inputsRead };
}

const cmpOffsets = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);

/** A run's inputs in order: applied ones in the order of their events; the others merged in by time. */
function ordered(inputs: RunInput[]): RunInput[] {
  const byEvents = inputs.filter((x) => x.applied).sort((x, y) => cmpOffsets(x.offset, y.offset));
  const byTime = inputs
    .filter((x) => !x.applied)
    .sort((x, y) => x.input.at - y.input.at || x.rank - y.rank || cmpOffsets(x.offset, y.offset));
  const out: RunInput[] = [];
  for (const x of byEvents) {
    while (byTime.length && byTime[0].input.at < x.input.at) out.push(byTime.shift()!);
    out.push(x);
  }
  out.push(...byTime);
  return out;
}

/** Each run reduced from its ordered inputs; runs without a StartRun of a known definition are unrebuildable. */
function rebuildAll(
  registry: WorkflowRegistry,
  perRun: Map<string, RunInput[]>,
  reduceOptions: ReduceOptions,
): { rebuilt: Map<string, RunState>; unrebuildable: string[] } {
  const rebuilt = new Map<string, RunState>();
  const unrebuildable: string[] = [];
  for (const [runId, unordered] of perRun) {
    const inputs = ordered(unordered);
    const start = inputs.find((i) => i.input.kind === 'start')?.input;
    const def = start && start.kind === 'start' ? registry.get(start.workflow, start.version) : undefined;
    if (!def) {
      unrebuildable.push(runId);
      continue;
    }
    let s: RunState | undefined;
    // In place: the states are this function's own, and a run of a 100,000-item map is not copied per input.
    for (const { input } of inputs) s = reduceInPlace(def, s, input, reduceOptions).state;
    if (s) rebuilt.set(runId, s);
  }
  return { rebuilt, unrebuildable };
}

/**
 * The live runs of wf.state: each run's latest snapshot, assembled with its map item segments (claim-checked states
 * read back when the serde has a blob store).
 * @throws the codec's ContractErrors; PayloadNotJsonError for a state that is not JSON; the store's errors
 */
async function liveRuns(serde: PayloadSerde, snapshots: Raw[]): Promise<Map<string, RunState>> {
  const live = new Map<string, RunState>();
  const segments = new Map<string, ItemSegment>();
  for (const r of snapshots) {
    if (!r.value) continue;
    const d = await serde.decode(Topic.WF_STATE, r.value, {
      topic: r.topic,
      partition: r.partition,
      offset: r.offset,
    });
    if (d.event !== 'RunSnapshot' || d.value.runId.startsWith(BARRIER_PREFIX)) continue;
    const text = serde.blobs ? await serde.text(d.value.state, d.value.stateRef) : d.value.state;
    const parsed = serde.parse(text, 'a RunSnapshot state');
    if (d.value.segment) {
      // Segments of a run's map items come before its core record (docs/workflows.md "Run state").
      const { mapId, index } = d.value.segment;
      segments.set(segmentKey(d.value.runId, mapId, index), parsed as ItemSegment);
      continue;
    }
    const s = assembleRunState(parsed as RunState, (mapId, index) =>
      segments.get(segmentKey(d.value.runId, mapId, index)),
    );
    const prev = live.get(s.runId);
    if (!prev || prev.sequence <= s.sequence) live.set(s.runId, s);
  }
  return live;
}

/** The live runs against the rebuilt ones: how many match, and every difference (a run on one side only too). */
function compareRuns(
  live: Map<string, RunState>,
  rebuilt: Map<string, RunState>,
): { matching: number; differences: Difference[] } {
  const differences: Difference[] = [];
  let matching = 0;
  for (const [runId, l] of live) {
    const b = rebuilt.get(runId);
    if (!b) {
      differences.push({ runId, field: 'existence', live: l.status, rebuilt: null });
      continue;
    }
    const d = diffRun(l, b);
    if (d.length) differences.push(...d);
    else matching++;
  }
  for (const runId of rebuilt.keys())
    if (!live.has(runId))
      differences.push({ runId, field: 'existence', live: null, rebuilt: rebuilt.get(runId)!.status });
  return { matching, differences };
}
