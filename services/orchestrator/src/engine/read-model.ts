import type { Consumer, EachBatchPayload, Kafka } from '@keyflow/kafka';

type KafkaMessage = EachBatchPayload['batch']['messages'][number];
import { blobKeySegment, legacyRunSegment, type ClaimCheck } from '@keyflow/blobs';
import { ContractError, PayloadNotJsonError, PayloadSerde, type EventCodec } from '@keyflow/contracts';
import type { RunSnapshot } from '@keyflow/schemas';
import {
  connectUntilAnswered,
  untilAnswered,
  PartitionQuarantine,
  subscribeWhenReady,
  undecodableBatchOf,
} from '@keyflow/kafka';
import { lastStableOffsets } from '@keyflow/ops';
import type { ComponentHealth, Counter, Logger, Registry } from '@keyflow/observability';
import {
  assembleRunState,
  runOfSegmentKey,
  segmentKey,
  TERMINAL,
  type ItemSegment,
  type RunState,
  type RunStatus,
} from '@keyflow/workflow';
import { COMPONENTS } from './components';
import { StartIndexedMap } from './run-index';
import { RunCounts } from './run-counts';
import { ChainTimes, type ChainFigures } from './chain-times';
import { isRetryable, KeyflowError, retryableOf } from '@keyflow/errors';
import { Topic } from '@keyflow/schemas';

/** The /health condition id of the read model's start-up catch-up (code CATCHING_UP). */
const CATCH_UP_CONDITION = 'read-model/catch-up';

/** Key prefix of the barrier records the engine writes to wf.state when it takes a partition over. */
export const BARRIER_PREFIX = '__barrier__/';

/** Why a wf.state record was skipped (the `reason` label of the skipped-snapshots metric). */
export const SKIP_REASONS = {
  undecodable: 'undecodable',
  stateNotJson: 'state not JSON',
  notRunState: 'state not a run',
  notSegment: 'segment not map items',
  blobUnreadable: 'state blob unreadable',
} as const;

/** The read model's consumer died for good: take-overs waiting on a barrier stop waiting. Not retryable here. */
export class ReadModelStoppedError extends KeyflowError {
  readonly code = 'READ_MODEL_STOPPED';
  readonly retryable = retryableOf('READ_MODEL_STOPPED');
  constructor(cause: unknown) {
    super(`the read model's wf.state consumer stopped: ${(cause as Error)?.message ?? String(cause)}`, {
      cause,
    });
  }
}

/**
 * A take-over waited for its barrier while the read model read nothing of the partition for longer than allowed
 * (ORCHESTRATOR_CATCH_UP_STALL_MS): the take-over is tried again. Retryable.
 */
export class CatchUpStalledError extends KeyflowError {
  readonly code = 'CATCH_UP_STALLED';
  readonly retryable = retryableOf('CATCH_UP_STALLED');
  constructor(
    readonly partition: number,
    readonly idleMs: number,
  ) {
    super(
      `wf.state partition ${partition}: nothing read for ${idleMs} ms while waiting for a take-over's barrier`,
    );
  }
}

/** A run's state this instance's engine committed, and the event id of the input that caused its snapshot. */
export interface OwnState {
  state: RunState;
  cause: string;
}

export interface RunEntry {
  state: RunState;
  /** wf.state partition the snapshot came from (= the run's partition on every co-partitioned topic). */
  partition: number;
}

/** One workflow's figures in {@link RunReadModel.workflowStats}. */
export interface WorkflowStats {
  workflow: string;
  /** Runs the read model holds, by status (ended runs stay until their retention). */
  byStatus: Record<string, number>;
  /** Runs that ended in the window. */
  ended: number;
  /**
   * Chain time (run start to end) of those, ms: median and 95th percentile (nearest rank, within CHAIN_ACCURACY);
   * null when none.
   */
  chainP50Ms: number | null;
  chainP95Ms: number | null;
}

/**
 * Per workflow: runs by status, and the chain time (start to end, ms) of the runs that ended in the window at `now`
 * (see {@link ChainTimes}): count, p50 and p95 by nearest rank within CHAIN_ACCURACY, or null when none ended.
 * Workflows sorted by name. What the read model keeps as runs change, built from `runs` at once.
 */
export function workflowStats(
  runs: Iterable<Pick<RunState, 'workflow' | 'status' | 'startedAt' | 'endedAt'>>,
  now = Date.now(),
): WorkflowStats[] {
  const counts = new RunCounts();
  const chains = new ChainTimes();
  for (const s of runs) {
    counts.add(s);
    if (s.endedAt !== undefined) chains.add(s.workflow, s.endedAt, s.endedAt - s.startedAt, now);
  }
  return statsOf(counts.values(), chains.figures(now));
}

/**
 * {@link workflowStats} from runs counted by workflow and status, and the chain times of those that ended in the
 * window: a call costs the distinct workflows, statuses and chain-time buckets, never the runs held.
 */
function statsOf(
  counts: Iterable<{ workflow: string; status: string; count: number }>,
  chains: Map<string, ChainFigures>,
): WorkflowStats[] {
  const by = new Map<string, Record<string, number>>();
  for (const c of counts) {
    let byStatus = by.get(c.workflow);
    if (!byStatus) by.set(c.workflow, (byStatus = {}));
    byStatus[c.status] = (byStatus[c.status] ?? 0) + c.count;
  }
  for (const workflow of chains.keys()) if (!by.has(workflow)) by.set(workflow, {});
  return [...by]
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([workflow, byStatus]) => {
      const c = chains.get(workflow);
      return {
        workflow,
        byStatus,
        ended: c?.ended ?? 0,
        chainP50Ms: c?.p50Ms ?? null,
        chainP95Ms: c?.p95Ms ?? null,
      };
    });
}

/**
 * The query side: every instance reads the whole compacted wf.state topic (read_committed) into memory, so any
 * instance answers for any run. It also lets the engine restore a partition it takes over: the engine writes a
 * barrier record to that partition and waits until this reader has seen it, which proves every snapshot committed
 * before it was read.
 */
export class RunReadModel {
  /** The runs, with an index by start time kept as they change (what {@link list} pages through). */
  private readonly runs = new StartIndexedMap<RunEntry, RunState>((e) => ({
    startedAt: e.state.startedAt,
    item: e.state,
  }));
  /** The latest segment records of each run's map items: run id -> segment key (segmentKey) -> segment. */
  private readonly segments = new Map<string, Map<string, ItemSegment>>();
  private readonly barriers = new Map<number, string>();
  /**
   * Runs held whose blob keys changed when run ids became injectively encoded, by their old run segment
   * (`legacyRunSegment`): which runs shared one blob prefix before (`x:1` and `x_1`).
   */
  private readonly legacySegments = new Map<string, Set<string>>();
  /**
   * The ids of the runs held that have not ended, by business key (what a signal addressed by business key and a
   * start serialised by key look up): ended runs, held until their retention, are not in it, so a lookup costs the
   * key's runs still going.
   */
  private readonly byBusinessKey = new Map<string, Set<string>>();
  /** Called with each run's state as a newer snapshot of it is read (see {@link onRunChange}). */
  private readonly changeListeners: Array<(s: RunState) => void> = [];
  private waiters: Array<{
    partition: number;
    nonce: string;
    resolve: () => void;
    reject: (e: Error) => void;
  }> = [];
  private consumer?: Consumer;
  /**
   * wf.state partitions paused on a record batch no codec decodes. A take-over of such a partition waits for its
   * barrier (behind the batch): with no progress it gives up (ORCHESTRATOR_CATCH_UP_STALL_MS) and retries until the
   * batch is read or ORCHESTRATOR_TAKEOVER_GIVE_UP_MS passes.
   */
  private readonly quarantine: PartitionQuarantine;
  private stopped?: Error;
  /** Per wf.state partition, when (ms since epoch) the read model last read or skipped a record of it. */
  private readonly progressAt = new Map<number, number>();
  /**
   * The start-up catch-up: per wf.state partition not yet caught up, the end offset (read_committed) it had when the
   * read model started; a partition leaves the map once a batch of it reaches that offset. Undefined before start.
   */
  private catchUp?: Map<number, bigint>;
  /** The runs held by workflow and status (what {@link workflowStats} counts). */
  private readonly counts = new RunCounts();
  /** The chain times of the runs held that ended in the window: what {@link workflowStats} takes them from. */
  private readonly chains = new ChainTimes();
  /** The ids of the runs held, by the wf.state partition of their snapshots (what {@link inPartition} reads). */
  private readonly byPartition = new Map<number, Set<string>>();
  /**
   * Runs' states this instance's engine committed to wf.state whose snapshot records the read model has not read
   * yet, by run id (see {@link committedHere}).
   */
  private readonly ownStates = new Map<string, OwnState>();
  snapshotsRead = 0;
  /** Of {@link snapshotsRead}: core records taken as this instance's engine committed them, not parsed again. */
  snapshotsOwn = 0;
  snapshotsSkipped = 0;
  /** Bytes to a checked snapshot state: Avro, the claim-checked state read back, JSON (see PayloadSerde). */
  private readonly serde: PayloadSerde;

  /**
   * @param opts.health where a crash for good of the consumer is reported (as {@link COMPONENTS.readModel})
   * @param opts.skipped counter of skipped records, labelled by `reason` ({@link SKIP_REASONS})
   */
  constructor(
    private readonly kafka: Kafka,
    private readonly codec: EventCodec,
    private readonly groupId: string,
    private readonly logger: Logger,
    private readonly opts: {
      health?: ComponentHealth;
      skipped?: Counter<'reason'>;
      /** Reads snapshots whose state came by claim check (`stateRef`); without it such snapshots are skipped. */
      claim?: ClaimCheck;
      registry?: Registry;
    } = {},
  ) {
    this.serde = new PayloadSerde(codec, opts.claim);
    this.quarantine = new PartitionQuarantine({
      component: COMPONENTS.readModel,
      logger,
      health: opts.health,
      registry: opts.registry,
      partitions: {
        pause: (topic, partition) => this.consumer?.pause([{ topic, partitions: [partition] }]),
        resume: (topic, partition) => this.consumer?.resume([{ topic, partitions: [partition] }]),
      },
    });
  }

  /** A record that cannot be a run's snapshot: logged, counted, and passed over (it must never stop the reader). */
  private skip(
    reason: (typeof SKIP_REASONS)[keyof typeof SKIP_REASONS],
    where: { topic: string; partition: number; offset: string; key: string },
    err?: unknown,
  ): void {
    this.snapshotsSkipped++;
    this.opts.skipped?.inc({ reason });
    this.logger.error({ err, reason, ...where }, 'malformed wf.state record skipped by the read model');
  }

  /** Marks the read model dead: /health says so, and barrier waiters fail at once instead of timing out. */
  private onStopped(err: Error): void {
    this.stopped = new ReadModelStoppedError(err);
    this.waiters.forEach((w) => w.reject(this.stopped!));
    this.waiters = [];
    this.opts.health?.fail(COMPONENTS.readModel, err);
  }

  async start(): Promise<void> {
    const c = this.kafka.consumer({
      groupId: this.groupId,
      readUncommitted: false,
      maxWaitTimeInMs: 100,
      sessionTimeout: 30_000,
    });
    this.consumer = c;
    c.on(c.events.CRASH, (e) => {
      this.logger.error({ err: e.payload.error, restart: e.payload.restart }, 'read model consumer crashed');
      if (!e.payload.restart) this.onStopped(e.payload.error);
    });
    await connectUntilAnswered(c, { what: 'read model consumer', logger: this.logger });
    await subscribeWhenReady(c, this.codec.physical(Topic.WF_STATE), true);
    this.catchUp = await this.endOffsets();
    this.reportCatchUp();
    // A batch of only aborted records or transaction markers reaches eachBatch never: kafkajs reports its end here.
    c.on(c.events.END_BATCH_PROCESS, (e) => {
      if (e.payload.batchSize === 0) this.reached(e.payload.partition, e.payload.lastOffset);
    });
    await c.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      // Every partition of wf.state is read at once: a take-over waits for its own partition only.
      partitionsConsumedConcurrently: 64,
      eachBatch: (p) => this.readBatch(c, p),
    });
  }

  /**
   * Reads one batch of wf.state: each record applied in order ({@link apply}) and its offset resolved; a run's core
   * record whose key comes again later in the batch is superseded before anyone can read it, so not decoded (a
   * wf.state not yet compacted holds many versions of each run). Tombstones (a run id used again after one must not
   * meet the forgotten run's sequence), segment records (a core record is assembled from the segments before it) and
   * barriers are all applied. Stops early when the consumer stops, the batch goes stale, or a record asks to.
   */
  private async readBatch(
    c: Consumer,
    { batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload,
  ): Promise<void> {
    const { topic, partition, messages } = batch;
    const keys = messages.map((m) => m.key?.toString() ?? '');
    const last = new Map<string, number>();
    keys.forEach((k, i) => {
      if (!k.startsWith(BARRIER_PREFIX) && !runOfSegmentKey(k)) last.set(k, i);
    });
    let beat = Date.now();
    for (let i = 0; i < messages.length; i++) {
      if (!isRunning() || isStale()) return;
      const message = messages[i];
      const key = keys[i];
      const later = last.get(key);
      if (later !== undefined && later !== i && message.value !== null && !undecodableBatchOf(message)) {
        resolveOffset(message.offset);
        continue;
      }
      if ((await this.apply(c, topic, partition, message, key)) === 'stop') return;
      resolveOffset(message.offset);
      this.progressed(partition);
      if (Date.now() - beat > 1_000) {
        await heartbeat();
        beat = Date.now();
      }
    }
    this.progressed(partition);
    this.reached(partition, batch.lastOffset());
  }

  /**
   * wf.state's end offsets now (read_committed: each partition's last stable offset), per partition with records;
   * partitions without any are caught up already. Asked again while the answer is a retriable error (a topic just
   * created has partitions without a leader for a moment: NOT_LEADER_FOR_PARTITION), until STARTUP_TIMEOUT_MS.
   */
  private async endOffsets(): Promise<Map<number, bigint>> {
    const admin = this.kafka.admin();
    await connectUntilAnswered(admin, { what: 'read model admin', logger: this.logger });
    try {
      const offsets = await untilAnswered(
        () => lastStableOffsets(this.kafka, this.codec.physical(Topic.WF_STATE), admin),
        { what: "read model: wf.state's end offsets", logger: this.logger },
      );
      return new Map(
        offsets.filter((o) => o.end > o.low).map((o) => [o.partition, o.end] as [number, bigint]),
      );
    } finally {
      await admin.disconnect();
    }
  }

  /** Every record of `partition` up to `lastOffset` (inclusive) was read: its start-up catch-up may be done. */
  private reached(partition: number, lastOffset: string): void {
    const target = this.catchUp?.get(partition);
    if (target === undefined || BigInt(lastOffset) + 1n < target) return;
    this.catchUp!.delete(partition);
    this.reportCatchUp();
    if (this.catchUp!.size === 0) this.logger.info('read model caught up with wf.state');
  }

  /** /health lists the partitions still behind (CATCHING_UP, degraded) until the start-up catch-up is done. */
  private reportCatchUp(): void {
    const behind = this.catchingUp();
    if (behind.length === 0) this.opts.health?.recover(CATCH_UP_CONDITION);
    else
      this.opts.health?.degrade(CATCH_UP_CONDITION, {
        code: 'CATCHING_UP',
        error: `wf.state partitions ${behind.join(', ')} not yet read up to where they ended when this instance started: runs on them may be unknown here for now (the API answers 503 CATCHING_UP, not 404)`,
      });
  }

  /**
   * Whether the read model has read every wf.state record committed before it started (its start-up catch-up), in
   * every partition, or in `partition` alone. Until then a run it does not hold may exist: the API answers 503
   * CATCHING_UP for it, not 404, and /health names the partitions still behind.
   */
  caughtUp(partition?: number): boolean {
    if (!this.catchUp) return false;
    return partition === undefined ? this.catchUp.size === 0 : !this.catchUp.has(partition);
  }

  /** The wf.state partitions whose start-up catch-up is not done, in order (empty once caught up). */
  catchingUp(): number[] {
    return this.catchUp ? [...this.catchUp.keys()].sort((a, b) => a - b) : [];
  }

  /** The read model read (or skipped) a record of `partition`: a take-over waiting on it is making progress. */
  private progressed(partition: number): void {
    this.progressAt.set(partition, Date.now());
  }

  /**
   * Applies one wf.state record. @returns 'stop' when the rest of the batch must not be read now (the partition was
   * paused on an undecodable batch or a registry that does not answer, and its position set back with a seek).
   */
  private async apply(
    c: Consumer,
    topic: string,
    partition: number,
    message: KafkaMessage,
    key: string,
  ): Promise<'stop' | void> {
    // A stand-in for a batch no codec could decode: pause here and refetch it on the next try.
    const undecodable = undecodableBatchOf(message);
    if (undecodable) {
      this.quarantine.add(topic, partition, undecodable);
      c.seek({ topic, partition, offset: undecodable.baseOffset });
      return 'stop';
    }
    if (message.value === null) {
      this.tombstone(key);
      return;
    }
    const where = { topic, partition, offset: message.offset, key };
    let d;
    try {
      // Without a turn of the event loop when the writer's schema is known (every record after the first).
      d =
        this.serde.decodeIfKnown(Topic.WF_STATE, message.value, where) ??
        (await this.serde.decode(Topic.WF_STATE, message.value, where));
    } catch (err) {
      // A registry that is away or refuses (retryable): the partition waits, named in /health, and this record
      // is fetched again with backoff. Bytes that never decode are skipped.
      if (err instanceof ContractError && err.retryable) {
        this.quarantine.hold(topic, partition, err);
        c.seek({ topic, partition, offset: message.offset });
        return 'stop';
      }
      this.skip(SKIP_REASONS.undecodable, where, err);
      return;
    }
    this.quarantine.ok(topic, partition);
    if (d.event !== 'RunSnapshot') return;
    if (key.startsWith(BARRIER_PREFIX)) return this.barrierRead(partition, d.value.state);
    if (!d.value.segment && this.ownRead(d.value, where.partition)) return;
    // The state inline, or (only then a turn of the event loop) read back from the blob store.
    let text: string | Promise<string> | undefined = this.serde.text(d.value.state, d.value.stateRef);
    if (typeof text !== 'string' && (text = await this.blobText(text, where)) === undefined) return;
    this.snapshotRead(d.value, text, where);
  }

  /**
   * This instance's engine committed these runs' states to wf.state, each in the core snapshot record of its
   * sequence caused by `cause` (the event id of the run's last input applied; called after the transaction's commit
   * was acknowledged): when the read model reads that record (same sequence, same causation id), or an older one of
   * the run (a read model a transaction or more behind), it takes the state as it is instead of decoding the
   * record's JSON (or reading a claim-checked state back from the blob store). Sound because a committed state is
   * never changed afterwards (PendingRuns copies a run before a batch changes it) and its record is read after the
   * older ones (holding it a little early shows nothing uncommitted). The sequence alone does not name a snapshot (an
   * unpark whose inputs are all ignored leaves it as it was: another owner can commit a different state with the same
   * one), so a record of the same sequence with another cause is decoded, and replaces a state taken early. A state
   * whose record was read already is not kept; the others are kept until their record, a later one or the run's
   * tombstone is read, so at most one per run.
   */
  committedHere(states: Iterable<OwnState>): void {
    for (const own of states) {
      const s = own.state;
      // A parked start's snapshots all have sequence 0 (parked.ts): which one a record is, only its text says.
      if (s.sequence === 0) continue;
      const held = this.runs.get(s.runId);
      if (held && held.state.sequence >= s.sequence) continue;
      this.ownStates.set(s.runId, own);
    }
  }

  /** Runs whose committed state waits here for its snapshot record (see {@link committedHere}). */
  ownStatesWaiting(): number {
    return this.ownStates.size;
  }

  /**
   * A run's core snapshot record: @returns true when it is the one of a state this instance's engine committed
   * ({@link committedHere}) or an older one, and that state is kept as the run's; false when the record must be
   * decoded (no such state waits, or the record is newer, or of the same sequence but another cause).
   */
  private ownRead(v: RunSnapshot, partition: number): boolean {
    const own = this.ownStates.get(v.runId);
    if (own === undefined) return false;
    const { sequence } = own.state;
    if (sequence <= v.sequence) this.ownStates.delete(v.runId);
    if (sequence < v.sequence || (sequence === v.sequence && own.cause !== v.metadata.causationId))
      return false;
    this.keep(own.state, partition);
    this.snapshotsOwn++;
    return true;
  }

  /** A tombstone of a run (its key is the run id) or of one of its segments (`<run>/<map>/<index>`). */
  private tombstone(key: string): void {
    const runOfSegment = runOfSegmentKey(key);
    if (runOfSegment) this.segments.get(runOfSegment)?.delete(key);
    else {
      this.ownStates.delete(key);
      const entry = this.runs.get(key);
      const gone = entry?.state;
      if (entry) this.byPartition.get(entry.partition)?.delete(key);
      if (gone) {
        this.counts.add(gone, -1);
        this.endedChanged(undefined, gone);
      }
      this.runs.delete(key);
      this.segments.delete(key);
      if (gone) this.unindexBusinessKey(gone);
      this.untrackLegacy(key);
    }
  }

  /** A take-over's barrier `nonce` read on `partition`: its waiter is released. */
  private barrierRead(partition: number, nonce: string): void {
    this.barriers.set(partition, nonce);
    this.waiters = this.waiters.filter((w) => {
      if (w.partition === partition && w.nonce === nonce) {
        w.resolve();
        return false;
      }
      return true;
    });
  }

  /**
   * A snapshot's state read from the blob store: undefined (skipped, counted) when the blob cannot be read for good
   * (a superseded snapshot's blob may have been swept; the run's latest snapshot follows) or there is no store here.
   * @throws the store's retryable errors (a store that does not answer is retried by the consumer)
   */
  private async blobText(text: Promise<string>, where: SnapshotWhere): Promise<string | undefined> {
    try {
      return await text;
    } catch (err) {
      if (isRetryable(err) && this.opts.claim) throw err;
      this.skip(SKIP_REASONS.blobUnreadable, where, err);
      return undefined;
    }
  }

  /**
   * A snapshot's state text, parsed and checked by the payload serde: a segment of a map's items is kept for its run's
   * core record; a run's core record is assembled with its segments and kept when not older than the one held.
   * Malformed ones are skipped and counted (SKIP_REASONS).
   */
  private snapshotRead(v: RunSnapshot, text: string, where: SnapshotWhere): void {
    let parsed: unknown;
    try {
      parsed = this.serde.parse(text, SNAPSHOT_STATE, v.segment ? segmentIssue : runStateIssue);
    } catch (err) {
      const reason =
        err instanceof PayloadNotJsonError
          ? SKIP_REASONS.stateNotJson
          : v.segment
            ? SKIP_REASONS.notSegment
            : SKIP_REASONS.notRunState;
      this.skip(reason, where, err);
      return;
    }
    if (v.segment) {
      // One segment of a map's items, written before its run's core record in the same transaction.
      const own = this.segments.get(v.runId) ?? new Map<string, ItemSegment>();
      own.set(segmentKey(v.runId, v.segment.mapId, v.segment.index), parsed as ItemSegment);
      this.segments.set(v.runId, own);
      return;
    }
    let state = parsed as RunState;
    const own = this.segments.get(state.runId);
    try {
      const runId = state.runId;
      state = assembleRunState(state, (mapId, index) => own?.get(segmentKey(runId, mapId, index)));
    } catch (err) {
      this.skip(SKIP_REASONS.notRunState, where, err);
      return;
    }
    this.keep(state, where.partition);
  }

  /**
   * A run's state read from `partition`: held when not older than the one held, and the listeners told (not again
   * for the state held already: one of this instance's engine taken early, see {@link ownRead}).
   */
  private keep(state: RunState, partition: number): void {
    const prev = this.runs.get(state.runId);
    if (!prev) this.trackLegacy(state.runId);
    if (!prev || (prev.state !== state && prev.state.sequence <= state.sequence)) {
      if (prev) this.counts.add(prev.state, -1);
      this.counts.add(state);
      this.endedChanged(state, prev?.state);
      if (prev?.partition !== partition) {
        if (prev) this.byPartition.get(prev.partition)?.delete(state.runId);
        let ids = this.byPartition.get(partition);
        if (!ids) this.byPartition.set(partition, (ids = new Set()));
        ids.add(state.runId);
      }
      this.runs.set(state.runId, { state, partition });
      const wasGoing = prev !== undefined && !TERMINAL.has(prev.state.status);
      const going = !TERMINAL.has(state.status);
      if (wasGoing && (!going || prev.state.businessKey !== state.businessKey))
        this.unindexBusinessKey(prev.state);
      if (going && (!wasGoing || prev.state.businessKey !== state.businessKey)) this.indexBusinessKey(state);
      for (const listener of this.changeListeners) listener(state);
    }
    this.snapshotsRead++;
  }

  /**
   * A run held anew (or forgotten: `state` undefined): its chain time counted when it ended, taken back when the state
   * it replaces had ended at another time (a retried run runs again or ends again) or it is forgotten.
   */
  private endedChanged(state: RunState | undefined, prev: RunState | undefined): void {
    if (prev?.endedAt === state?.endedAt) return;
    if (prev?.endedAt !== undefined)
      this.chains.remove(prev.workflow, prev.endedAt, prev.endedAt - prev.startedAt);
    if (state?.endedAt !== undefined)
      this.chains.add(state.workflow, state.endedAt, state.endedAt - state.startedAt);
  }

  async stop(): Promise<void> {
    this.quarantine.close();
    await this.consumer?.disconnect();
  }

  /** False once the consumer died for good. */
  healthy(): boolean {
    return this.consumer !== undefined && !this.stopped;
  }

  /**
   * Resolves when the barrier `nonce` written to `partition` has been read. Waits as long as the read model makes
   * progress on that partition (a catch-up of a large wf.state takes what it takes); gives up only when it has read
   * nothing of it for `noProgressMs` (ms).
   * @throws ReadModelStoppedError at once when the consumer died for good (before or while waiting);
   *   CatchUpStalledError after `noProgressMs` without progress on the partition
   */
  waitForBarrier(partition: number, nonce: string, noProgressMs = 60_000): Promise<void> {
    if (this.barriers.get(partition) === nonce) return Promise.resolve();
    if (this.stopped) return Promise.reject(this.stopped);
    const since = Date.now();
    return new Promise((resolve, reject) => {
      const check = setInterval(
        () => {
          const idle = Date.now() - Math.max(since, this.progressAt.get(partition) ?? 0);
          if (idle <= noProgressMs) return;
          this.waiters = this.waiters.filter((w) => w !== waiter);
          waiter.reject(new CatchUpStalledError(partition, idle));
        },
        Math.max(10, Math.min(1_000, noProgressMs / 4)),
      );
      check.unref();
      const waiter = {
        partition,
        nonce,
        resolve: () => {
          clearInterval(check);
          resolve();
        },
        reject: (e: Error) => {
          clearInterval(check);
          reject(e);
        },
      };
      this.waiters.push(waiter);
    });
  }

  private trackLegacy(runId: string): void {
    const legacy = legacyRunSegment(runId);
    if (legacy === blobKeySegment(runId)) return;
    const runs = this.legacySegments.get(legacy) ?? new Set<string>();
    this.legacySegments.set(legacy, runs.add(runId));
  }

  private untrackLegacy(runId: string): void {
    const legacy = legacyRunSegment(runId);
    const runs = this.legacySegments.get(legacy);
    if (runs?.delete(runId) && runs.size === 0) this.legacySegments.delete(legacy);
  }

  /**
   * Whether a run held other than `runId` had the same blob key prefix as `runId` before run ids were encoded
   * injectively (`legacyRunSegment`: `x:1` and `x_1`): then the blobs under that old prefix are not all `runId`'s.
   */
  sharesLegacyBlobPrefix(runId: string): boolean {
    const runs = this.legacySegments.get(legacyRunSegment(runId));
    return runs !== undefined && [...runs].some((r) => r !== runId);
  }

  /** The keys of the segment records held for `runId` (what a tombstone of the run must also delete). */
  segmentKeys(runId: string): string[] {
    return [...(this.segments.get(runId)?.keys() ?? [])];
  }

  /**
   * Calls `listener` with a run's state each time a newer snapshot of it is read (a run that appears, changes status,
   * ends), on the read model's consumer path: the listener must be quick and must not throw.
   */
  onRunChange(listener: (s: RunState) => void): void {
    this.changeListeners.push(listener);
  }

  /**
   * The run a signal addressed by business key goes to: the newest (by start time, then run id) run with that business
   * key that has not ended; undefined when none has. Costs the key's runs that have not ended (ended ones leave the
   * index), not every run it ever had.
   */
  runByBusinessKey(businessKey: string): RunState | undefined {
    let best: RunState | undefined;
    for (const id of this.byBusinessKey.get(businessKey) ?? []) {
      const s = this.runs.get(id)?.state;
      if (!s || TERMINAL.has(s.status)) continue;
      if (!best || s.startedAt > best.startedAt || (s.startedAt === best.startedAt && s.runId > best.runId))
        best = s;
    }
    return best;
  }

  private indexBusinessKey(s: RunState): void {
    const ids = this.byBusinessKey.get(s.businessKey);
    if (ids) ids.add(s.runId);
    else this.byBusinessKey.set(s.businessKey, new Set([s.runId]));
  }

  private unindexBusinessKey(s: RunState): void {
    const ids = this.byBusinessKey.get(s.businessKey);
    if (!ids) return;
    ids.delete(s.runId);
    if (ids.size === 0) this.byBusinessKey.delete(s.businessKey);
  }

  get(runId: string): RunState | undefined {
    return this.runs.get(runId)?.state;
  }

  /**
   * The runs whose snapshots live in `partition` (for a partition the engine takes over, again after each failed
   * transaction of it), as they are when each is reached: costs that partition's runs, from an index kept as snapshots
   * are read, not every run held. A caller may yield between runs (see restorePartition).
   */
  *inPartition(partition: number): Generator<RunState> {
    for (const id of this.byPartition.get(partition) ?? []) {
      const s = this.runs.get(id)?.state;
      if (s) yield s;
    }
  }

  /**
   * Runs filtered by workflow, status and start time (ms), newest first, `limit` per page; `cursor` is the
   * `next` of the previous page. Reads the start-time index kept as snapshots arrive ({@link RunIndex}): a page costs
   * its size, or with a filter at most RUN_LIST_SCAN_MAX entries (a short page then comes with `next`).
   * @throws RangeError when `cursor` is not a cursor of this listing
   */
  list(q: {
    workflow?: string;
    status?: RunStatus;
    from?: number;
    to?: number;
    limit: number;
    cursor?: string;
  }): { runs: RunState[]; next?: string } {
    const { items, next } = this.runs.index.page(
      q,
      (s) => (!q.workflow || s.workflow === q.workflow) && (!q.status || s.status === q.status),
    );
    return { runs: items, next };
  }

  /**
   * {@link workflowStats} of the runs this read model holds, from the counts and chain times it keeps as runs change:
   * costs the distinct workflows, statuses and chain-time buckets, never the runs held nor those that ended in the
   * window (GET /ops/overview, which the console polls, runs on the engine's event loop).
   */
  workflowStats(now = Date.now()): WorkflowStats[] {
    return statsOf(this.counts.values(), this.chains.figures(now));
  }

  get size(): number {
    return this.runs.size;
  }
}

/** Where a wf.state record was read (what a skipped record's log line names). */
type SnapshotWhere = { topic: string; partition: number; offset: string; key: string };

/** How the payload serde names a snapshot's state in its errors. */
const SNAPSHOT_STATE = 'a RunSnapshot state';

/** Why a parsed state is not a segment of map items (undefined when it is one). */
function segmentIssue(v: unknown): string | undefined {
  const seg = v as ItemSegment | null;
  return Array.isArray(seg?.steps) && Array.isArray(seg?.outputs) ? undefined : 'not a segment of map items';
}

/** Why a parsed state is not a run's core state (undefined when it is one). */
function runStateIssue(v: unknown): string | undefined {
  const s = v as RunState | null;
  return typeof s === 'object' &&
    s !== null &&
    typeof s.runId === 'string' &&
    typeof s.sequence === 'number' &&
    typeof s.steps === 'object' &&
    s.steps !== null
    ? undefined
    : 'not a run state';
}
