import type { Consumer, Kafka } from '@keyflow/kafka';
import type { ClaimCheck } from '@keyflow/blobs';
import { ContractError, type EventCodec } from '@keyflow/contracts';
import {
  connectUntilAnswered,
  PartitionQuarantine,
  subscribeWhenReady,
  undecodableBatchOf,
} from '@keyflow/kafka';
import type { ComponentHealth, Counter, Logger, Registry } from '@keyflow/observability';
import {
  assembleRunState,
  runOfSegmentKey,
  segmentKey,
  type ItemSegment,
  type RunState,
  type RunStatus,
} from '@keyflow/workflow';
import { COMPONENTS } from './components';
import { StartIndexedMap } from './run-index';
import { KeyflowError } from '@keyflow/errors';

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
  readonly retryable = false;
  constructor(cause: unknown) {
    super(`the read model's wf.state consumer stopped: ${(cause as Error)?.message ?? String(cause)}`, {
      cause,
    });
  }
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
  /** Chain time (run start to end) of those, ms: median and 95th percentile (nearest rank); null when none. */
  chainP50Ms: number | null;
  chainP95Ms: number | null;
}

/**
 * Per workflow: runs by status, and the chain time (start to end, ms) of the runs that ended at or after `sinceMs`
 * (ms since epoch): count, p50 and p95 by nearest rank (the smallest value with at least that share of the values
 * at or below it), or null when none ended. Workflows sorted by name.
 */
export function workflowStats(
  runs: Iterable<Pick<RunState, 'workflow' | 'status' | 'startedAt' | 'endedAt'>>,
  sinceMs: number,
): WorkflowStats[] {
  const by = new Map<string, { byStatus: Record<string, number>; chain: number[] }>();
  for (const s of runs) {
    let w = by.get(s.workflow);
    if (!w) by.set(s.workflow, (w = { byStatus: {}, chain: [] }));
    w.byStatus[s.status] = (w.byStatus[s.status] ?? 0) + 1;
    if (s.endedAt !== undefined && s.endedAt >= sinceMs) w.chain.push(s.endedAt - s.startedAt);
  }
  const rank = (sorted: number[], q: number) => sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)];
  return [...by]
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([workflow, w]) => {
      const c = w.chain.sort((a, b) => a - b);
      return {
        workflow,
        byStatus: w.byStatus,
        ended: c.length,
        chainP50Ms: c.length ? rank(c, 0.5) : null,
        chainP95Ms: c.length ? rank(c, 0.95) : null,
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
  private waiters: Array<{
    partition: number;
    nonce: string;
    resolve: () => void;
    reject: (e: Error) => void;
  }> = [];
  private consumer?: Consumer;
  /**
   * wf.state partitions paused on a record batch no codec decodes. A take-over of such a partition waits for its
   * barrier (behind the batch) and so retries until the batch is read or ORCHESTRATOR_TAKEOVER_GIVE_UP_MS passes.
   */
  private readonly quarantine: PartitionQuarantine;
  private stopped?: Error;
  snapshotsRead = 0;
  snapshotsSkipped = 0;

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
    await subscribeWhenReady(c, this.codec.physical('wf.state'), true);
    await c.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        // A stand-in for a batch no codec could decode: pause here and refetch it on the next try (kafkajs
        // resolves a message once eachMessage returns, so the position is set back with a seek).
        const undecodable = undecodableBatchOf(message);
        if (undecodable) {
          this.quarantine.add(topic, partition, undecodable);
          c.seek({ topic, partition, offset: undecodable.baseOffset });
          return;
        }
        const key = message.key?.toString() ?? '';
        if (message.value === null) {
          // A tombstone of a run (its key is the run id) or of one of its segments (`<run>/<map>/<index>`).
          const runOfSegment = runOfSegmentKey(key);
          if (runOfSegment) this.segments.get(runOfSegment)?.delete(key);
          else {
            this.runs.delete(key);
            this.segments.delete(key);
          }
          return;
        }
        const where = { topic, partition, offset: message.offset, key };
        let d;
        try {
          d = await this.codec.decode('wf.state', message.value, {
            topic,
            partition,
            offset: message.offset,
          });
        } catch (err) {
          // A registry that is away or refuses (retryable): the partition waits, named in /health, and this record
          // is fetched again with backoff. Bytes that never decode are skipped.
          if (err instanceof ContractError && err.retryable) {
            this.quarantine.hold(topic, partition, err);
            c.seek({ topic, partition, offset: message.offset });
            return;
          }
          this.skip(SKIP_REASONS.undecodable, where, err);
          return;
        }
        this.quarantine.ok(topic, partition);
        if (d.event !== 'RunSnapshot') return;
        if (key.startsWith(BARRIER_PREFIX)) {
          this.barriers.set(partition, d.value.state);
          this.waiters = this.waiters.filter((w) => {
            if (w.partition === partition && w.nonce === d.value.state) {
              w.resolve();
              return false;
            }
            return true;
          });
          return;
        }
        let text = d.value.state;
        if (d.value.stateRef) {
          try {
            if (!this.opts.claim) throw new Error(`no blob store to read ${d.value.stateRef}`);
            text = await this.opts.claim.resolve(d.value.state, d.value.stateRef);
          } catch (err) {
            // A store that does not answer is retried by the consumer; a blob gone for good is skipped and counted
            // (a superseded snapshot's blob may have been swept; the run's latest snapshot follows).
            if ((err as { retryable?: boolean }).retryable !== false && this.opts.claim) throw err;
            this.skip(SKIP_REASONS.blobUnreadable, where, err);
            return;
          }
        }
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch (err) {
          this.skip(SKIP_REASONS.stateNotJson, where, err);
          return;
        }
        if (d.value.segment) {
          // One segment of a map's items, written before its run's core record in the same transaction.
          const seg = parsed as ItemSegment;
          if (!Array.isArray(seg?.steps) || !Array.isArray(seg?.outputs)) {
            this.skip(SKIP_REASONS.notSegment, where);
            return;
          }
          const own = this.segments.get(d.value.runId) ?? new Map<string, ItemSegment>();
          own.set(segmentKey(d.value.runId, d.value.segment.mapId, d.value.segment.index), seg);
          this.segments.set(d.value.runId, own);
          return;
        }
        let state = parsed as RunState;
        if (
          typeof state !== 'object' ||
          state === null ||
          typeof state.runId !== 'string' ||
          typeof state.sequence !== 'number' ||
          typeof state.steps !== 'object' ||
          state.steps === null
        ) {
          this.skip(SKIP_REASONS.notRunState, where);
          return;
        }
        const own = this.segments.get(state.runId);
        try {
          const runId = state.runId;
          state = assembleRunState(state, (mapId, index) => own?.get(segmentKey(runId, mapId, index)));
        } catch (err) {
          this.skip(SKIP_REASONS.notRunState, where, err);
          return;
        }
        const prev = this.runs.get(state.runId);
        if (!prev || prev.state.sequence <= state.sequence) this.runs.set(state.runId, { state, partition });
        this.snapshotsRead++;
      },
    });
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
   * Resolves when the barrier `nonce` written to `partition` has been read.
   * @throws ReadModelStoppedError at once when the consumer died for good (before or while waiting); an Error
   *   after `timeoutMs` (ms) otherwise
   */
  waitForBarrier(partition: number, nonce: string, timeoutMs = 60_000): Promise<void> {
    if (this.barriers.get(partition) === nonce) return Promise.resolve();
    if (this.stopped) return Promise.reject(this.stopped);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`wf.state partition ${partition}: barrier not read within ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.waiters.push({
        partition,
        nonce,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
    });
  }

  /** The keys of the segment records held for `runId` (what a tombstone of the run must also delete). */
  segmentKeys(runId: string): string[] {
    return [...(this.segments.get(runId)?.keys() ?? [])];
  }

  get(runId: string): RunState | undefined {
    return this.runs.get(runId)?.state;
  }

  /** The runs whose snapshots live in `partition` (for a partition the engine takes over). */
  inPartition(partition: number): RunState[] {
    return [...this.runs.values()].filter((e) => e.partition === partition).map((e) => e.state);
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
   * {@link workflowStats} of the runs this read model holds.
   */
  workflowStats(sinceMs: number): WorkflowStats[] {
    return workflowStats(
      (function* (runs) {
        for (const e of runs) yield e.state;
      })(this.runs.values()),
      sinceMs,
    );
  }

  get size(): number {
    return this.runs.size;
  }
}
