import { Topic } from '@keyflow/schemas';
import { randomUUID } from 'node:crypto';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { JavaCompatiblePartitioner, TRANSACTIONAL_RETRY, type Kafka, type Producer } from '@keyflow/kafka';
import { newMetadata, type EventCodec } from '@keyflow/contracts';
import type { Logger, TraceContext } from '@keyflow/observability';
import { OrderedMap } from '@js-sdsl/ordered-map';
import { retryPolicy, TERMINAL, type RunState } from '@keyflow/workflow';
import type { OrchestratorConfig } from '../config';
import { BARRIER_PREFIX, type RunReadModel } from './read-model';
import type { OrchestratorMetrics } from './metrics';
import { RunCounts } from './run-counts';
import { TimerQueue } from './timers';

/**
 * Ownership and fencing of the engine's partitions: one transactional producer per partition (transactional.id
 * `<group>-p<partition>`, the pre-KIP-447 pattern), whose initTransactions fences the previous owner's producer; a
 * barrier written to wf.state and read back by the read model proves every snapshot committed before it was read,
 * so the partition's runs are restored from the read model. See docs/architecture/engine.md.
 */

/** Backoff between take-overs of a partition whose take-over or transaction failed (full jitter). */
export const TAKEOVER_RETRY = retryPolicy({
  maxAttempts: Number.MAX_SAFE_INTEGER,
  initialDelayMs: 500,
  maxDelayMs: 15_000,
});

/**
 * Sets a run's committed state in `o` (after a commit, or restored at a take-over), with the indexes kept beside
 * `o.runs`: the runs holding parked inputs, the runs holding timers and the counts by workflow and status.
 */
export function holdRun(o: OwnedPartition, s: RunState): void {
  const prev = o.runs.get(s.runId);
  if (prev) o.counts.add(prev, -1);
  o.counts.add(s);
  o.runs.set(s.runId, s);
  if (s.parked?.length) o.parked.add(s.runId);
  else o.parked.delete(s.runId);
  if (hasTimers(s)) o.timed.add(s.runId);
  else o.timed.delete(s.runId);
  const before = prev && endedKey(prev);
  const after = endedKey(s);
  if (before !== after) {
    if (before) o.ended.eraseElementByKey(before);
    if (after) o.ended.setElement(after, s.runId);
  }
}

/**
 * A run's key in {@link OwnedPartition.ended}, or undefined when it has not ended: the time retention counts from
 * (`endedAt`, else `updatedAt` for a state written before `endedAt` existed) zero-padded to 16 digits, then the run
 * id, so the keys' string order is the order the runs ended in.
 */
export function endedKey(s: RunState): string | undefined {
  if (!TERMINAL.has(s.status)) return undefined;
  return `${String(s.endedAt ?? s.updatedAt).padStart(16, '0')}/${s.runId}`;
}

/** Whether `s` holds a timer (without listing them). */
function hasTimers(s: RunState): boolean {
  for (const _ in s.timers) return true;
  return false;
}

/** Drops a run from `o` (tombstoned: a dead-lettered parked start, or forgotten after its retention). */
export function dropRun(o: OwnedPartition, runId: string): void {
  const prev = o.runs.get(runId);
  if (prev) o.counts.add(prev, -1);
  const ended = prev && endedKey(prev);
  if (ended) o.ended.eraseElementByKey(ended);
  o.runs.delete(runId);
  o.parked.delete(runId);
  o.timed.delete(runId);
  o.traces.delete(runId);
}

/** A partition the engine owns: its fenced producer, its runs and timers, and what serialises its transactions. */
export interface OwnedPartition {
  partition: number;
  producer: Producer;
  runs: Map<string, RunState>;
  /**
   * The ids of the runs of `runs` that hold parked inputs, kept as `runs` changes: what /health and the metrics name
   * once a second cost the parked runs, not every owned run (ended runs stay owned until their retention).
   */
  parked: Set<string>;
  /**
   * The ids of the runs of `runs` that hold timers, kept as `runs` changes: what a rebuild of {@link timers} walks
   * (ended runs hold none, and stay owned until their retention).
   */
  timed: Set<string>;
  /**
   * The runs of `runs` that ended, in the order they ended ({@link endedKey} to run id; a red-black tree), kept as
   * `runs` changes: a retention sweep reads the expired ones from its front, never every run held.
   */
  ended: OrderedMap<string, string>;
  /** The runs of `runs` by workflow and status (see {@link RunCounts}). */
  counts: RunCounts;
  /** The durable timers of `runs`, in due order. */
  timers: TimerQueue;
  /** Set once every run of the partition is restored (a restore yields to the event loop: see restorePartition). */
  restored: boolean;
  ready: Promise<void>;
  /**
   * Failed take-overs or transactions of this partition since its last commit, and when the first of them happened
   * (ms since epoch); carried over by a re-take-over.
   */
  failures: { count: number; since: number } | null;
  /** Serialises the batches of wf.requests and task.results of this partition (one transaction at a time). */
  lock: Promise<void>;
  revoked: boolean;
  /**
   * Per input topic, since when (ms since epoch) a batch of this partition has been waiting to be committed; absent
   * when none waits. What /health reads to name a stalled partition (ORCHESTRATOR_PARTITION_STALL_MS).
   */
  waitingSince: Map<string, number>;
  /**
   * Per running run, the trace context of its last applied input's span: what its timers fire continues that trace.
   * In memory only (a take-over starts empty: a timer fired before the run's next input starts a new trace).
   */
  traces: Map<string, TraceContext>;
}

/**
 * The transaction timeout of a partition's producer, in ms (kafkajs `transactionTimeout`, the coordinator's
 * transaction.timeout.ms for its transactional id): the coordinator aborts a transaction open longer, and fences the
 * producer's epoch. A batch's transaction opens before its apply (commit.ts openBatch), so the engine aborts it when
 * an apply runs past half of it, and opens another for the commit.
 */
export const ENGINE_TRANSACTION_TIMEOUT_MS = 30_000;

/**
 * A partition taken over, not yet restored (`ready` is set by {@link restorePartition}): its producer's
 * transactional id fences the previous owner once connected.
 */
export function ownedPartition(
  kafka: Kafka,
  cfg: OrchestratorConfig,
  partition: number,
  failures: OwnedPartition['failures'],
): OwnedPartition {
  const producer = kafka.producer({
    transactionalId: `${cfg.ORCHESTRATOR_GROUP_ID}-p${partition}`,
    createPartitioner: JavaCompatiblePartitioner, // murmur2, as Java: run-keyed topics stay co-partitioned
    idempotent: true,
    maxInFlightRequests: 1,
    transactionTimeout: ENGINE_TRANSACTION_TIMEOUT_MS,
    retry: TRANSACTIONAL_RETRY, // a CONCURRENT_TRANSACTIONS refusal between back-to-back transactions
  });
  return {
    partition,
    producer,
    runs: new Map(),
    parked: new Set(),
    timed: new Set(),
    ended: new OrderedMap<string, string>(),
    counts: new RunCounts(),
    timers: new TimerQueue(),
    restored: false,
    ready: Promise.resolve(),
    failures,
    lock: Promise.resolve(),
    revoked: false,
    waitingSince: new Map(),
    traces: new Map(),
  };
}

/** What a restore needs of the engine. */
export interface RestoreDeps {
  cfg: OrchestratorConfig;
  codec: EventCodec;
  readModel: RunReadModel;
  metrics: OrchestratorMetrics;
  logger: Logger;
}

/** Runs restored between two yields to the event loop (see {@link restorePartition}). */
const RESTORE_YIELD_EVERY = 10_000;

/**
 * Fences the previous owner (connecting the producer: InitProducerId), writes a barrier to the partition of wf.state
 * in a transaction, waits until the read model has read it, and restores the partition's runs (terminal ones too: a
 * late result for them must be recognised as stale, not as an unknown run).
 * @throws what the producer throws (a fenced epoch, a broker away); ReadModelStoppedError or CatchUpStalledError
 *   from the wait for the barrier
 */
export async function restorePartition(o: OwnedPartition, d: RestoreDeps): Promise<void> {
  const { partition, producer } = o;
  const t0 = Date.now();
  await producer.connect(); // InitProducerId: fences a zombie with the same transactional id
  const nonce = `${d.cfg.ORCHESTRATOR_INSTANCE_ID}/${randomUUID()}`;
  const tx = await producer.transaction();
  const barrierKey = `${BARRIER_PREFIX}${partition}`;
  const value = d.codec.encode(Topic.WF_STATE, 'RunSnapshot', {
    metadata: newMetadata('RunSnapshot', { key: barrierKey, correlationId: barrierKey }),
    runId: barrierKey,
    sequence: 0,
    status: 'barrier',
    state: nonce,
    stateRef: null,
    segment: null,
  });
  await tx.send({
    topic: d.codec.physical(Topic.WF_STATE),
    messages: [{ partition, key: barrierKey, value }],
  });
  await tx.commit();
  await d.readModel.waitForBarrier(partition, nonce, d.cfg.ORCHESTRATOR_CATCH_UP_STALL_MS);
  // A partition holds its ended runs until their retention (millions after days): restored in slices, yielding to
  // the event loop between them, so the other partitions' batches, timers and the API go on meanwhile. Past the
  // barrier nothing else writes this partition's wf.state (the previous owner is fenced), so its runs stay put.
  let n = 0;
  for (const s of d.readModel.inPartition(partition)) {
    if (++n % RESTORE_YIELD_EVERY === 0) {
      await yieldToLoop();
      if (o.revoked) return; // revoked or replaced meanwhile: nothing reads this partition object any more
    }
    holdRun(o, s);
    o.timers.track(s);
  }
  o.restored = true;
  d.metrics.restores.inc();
  d.logger.info({ partition, runs: o.runs.size, ms: Date.now() - t0 }, 'partition restored from wf.state');
}

/**
 * Runs `f` with partition `o`'s lock: one transaction at a time per partition (the engine's two input topics of
 * partition p and the retention sweep share its producer; a topic trigger's batches and releases share theirs), in the
 * order the callers asked.
 */
export async function exclusively(o: { lock: Promise<void> }, f: () => Promise<void>): Promise<void> {
  const previous = o.lock;
  let release!: () => void;
  o.lock = new Promise((r) => (release = r));
  await previous;
  try {
    await f();
  } finally {
    release();
  }
}

/** The failures of `o` counted one more (the first one's time kept). */
export function oneMoreFailure(o: OwnedPartition): { count: number; since: number } {
  return { count: (o.failures?.count ?? 0) + 1, since: o.failures?.since ?? Date.now() };
}
