import type { Kafka } from '@keyflow/kafka';
import { undecodableBatchError, undecodableBatchOf } from '@keyflow/kafka';
import type { EventCodec } from '@keyflow/contracts';
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
import { resolveInput, snapshotStateText, toWorkflowInput } from './engine/mapping';
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
  // Where and when the engine applied each input: its first lifecycle event (offset in the run's partition, time).
  const applied = new Map<string, { offset: bigint; at: number }>();
  // Undecodable records are skipped: the engine dead-lettered such inputs too.
  const decodeOrSkip = (r: Raw) =>
    codec
      .decode(r.logical, r.value, { topic: r.topic, partition: r.partition, offset: r.offset })
      .catch(() => undefined);
  for (const r of events) {
    const d = await decodeOrSkip(r);
    if (!d) continue;
    const cause = d.value.metadata.causationId;
    if (cause && !applied.has(cause))
      applied.set(cause, { offset: BigInt(r.offset), at: d.value.metadata.occurredAt });
  }
  const perRun = new Map<
    string,
    Array<{ input: WorkflowInput; rank: number; offset: bigint; applied: boolean }>
  >();
  let inputsRead = 0;
  for (const r of [...requests, ...results]) {
    const raw = await decodeOrSkip(r);
    if (!raw) continue;
    const d = claim ? await resolveInput(raw, claim) : raw;
    const decoded = toWorkflowInput(
      d,
      (name, v) => registry.get(name, v),
      !applied.has(d.value.metadata.eventId),
    );
    if ('invalid' in decoded) continue;
    const when = applied.get(decoded.eventId);
    const input = when ? { ...decoded, at: when.at } : decoded;
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
  const rebuilt = new Map<string, RunState>();
  const unrebuildable: string[] = [];
  for (const [runId, inputs] of perRun) {
    const cmp = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);
    // Applied inputs in the order of their events; the others merged in by time (see the doc above).
    const byEvents = inputs.filter((x) => x.applied).sort((x, y) => cmp(x.offset, y.offset));
    const byTime = inputs
      .filter((x) => !x.applied)
      .sort((x, y) => x.input.at - y.input.at || x.rank - y.rank || cmp(x.offset, y.offset));
    inputs.length = 0;
    for (const x of byEvents) {
      while (byTime.length && byTime[0].input.at < x.input.at) inputs.push(byTime.shift()!);
      inputs.push(x);
    }
    inputs.push(...byTime);
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
  const live = new Map<string, RunState>();
  const segments = new Map<string, ItemSegment>();
  for (const r of snapshots) {
    if (!r.value) continue;
    const d = await codec.decode(Topic.WF_STATE, r.value, {
      topic: r.topic,
      partition: r.partition,
      offset: r.offset,
    });
    if (d.event !== 'RunSnapshot' || d.value.runId.startsWith(BARRIER_PREFIX)) continue;
    const text = claim ? await snapshotStateText(d.value, claim) : d.value.state;
    if (d.value.segment) {
      // Segments of a run's map items come before its core record (README "Run state").
      const { mapId, index } = d.value.segment;
      segments.set(segmentKey(d.value.runId, mapId, index), JSON.parse(text) as ItemSegment);
      continue;
    }
    const s = assembleRunState(JSON.parse(text) as RunState, (mapId, index) =>
      segments.get(segmentKey(d.value.runId, mapId, index)),
    );
    const prev = live.get(s.runId);
    if (!prev || prev.sequence <= s.sequence) live.set(s.runId, s);
  }
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
  return { inputsRead, runsRebuilt: rebuilt.size, runsLive: live.size, matching, differences, unrebuildable };
}
