import { setMaxListeners } from 'node:events';
import { hostname } from 'node:os';
import { PartitionAssigners, type Consumer, type EachBatchPayload } from 'kafkajs';
import { connectUntilAnswered } from '../client/connect';
import { assertKafkajsPatched } from '../client/kafkajs-patch';
import { OffsetTracker } from './offset-tracker';
import { Semaphore } from './semaphore';
import { abortableSleep, linkSignals } from '../client/sleep';
import { subscribeWhenReady } from '../admin/topics';
import { subscribedRoundRobinAssigner } from './subscribed-assigner';
import { UndecodableBatchError } from '../codecs/codecs';
import { PartitionQuarantine, undecodableAt } from './undecodable';
import { backoffDelayMs, resolveOptions, type OrderedConsumerOptions, type Resolved } from './options';
import type { ConsumedMessage, ConsumerStats, HandleContext } from './types';
import { KeyflowError, retryableOf } from '@keyflow/errors';
import { isConsumerGroupNotInitialized } from '../kafka-errors';

/** The partition of a message was revoked in a rebalance while it ran: its new owner redelivers it. Retryable. */
export class PartitionRevokedError extends KeyflowError {
  readonly retryable = retryableOf('PARTITION_REVOKED');
  readonly code = 'PARTITION_REVOKED';
  constructor(readonly topicPartition: string) {
    super(`partition ${topicPartition} was revoked in a rebalance; its new owner redelivers the message`);
  }
}

/**
 * Least time stop() gives the offset commits asked for once the work has settled, in ms, even when the drain used up
 * its deadline: the commit of work that finished at the deadline gets its round trip (the coordinator answers after
 * its append linger, about 5 ms on Kafka 4).
 */
const STOP_COMMIT_GRACE_MS = 2_000;

/**
 * The consumer is stopping (stop() was called): work not started yet should not start. Retryable: the message is not
 * committed, and its next owner (or this process after a restart) handles it.
 */
export class ConsumerStoppingError extends KeyflowError {
  readonly retryable = retryableOf('CONSUMER_STOPPING');
  readonly code = 'CONSUMER_STOPPING';
  constructor(readonly groupId: string) {
    super(`consumer of group ${groupId} is stopping; work not started yet is left for redelivery`);
  }
}

/** A batch ended with an error (not a handler's: those are retried): `firstOpen` is its first offset not done. */
class BatchFailedError extends KeyflowError {
  readonly code = 'BATCH_FAILED';
  /** The consumer seeks back and fetches the batch again. */
  readonly retryable = retryableOf('BATCH_FAILED');
  constructor(
    tp: string,
    readonly firstOpen: string,
    cause: unknown,
  ) {
    super(`batch of ${tp} failed at offset ${firstOpen}: ${(cause as Error)?.message ?? String(cause)}`, {
      cause,
    });
  }
}

/** `topic:partition` back to its parts (topic names may hold ':' in a prefix; the partition never does). */
const splitTp = (tp: string): [string, number] => {
  const i = tp.lastIndexOf(':');
  return [tp.slice(0, i), Number(tp.slice(i + 1))];
};

/**
 * A consumer-group runner that keeps per-key order while running different keys concurrently.
 *
 * kafkajs does not fetch again from a broker until every batch of its previous fetch has been handled
 * (tulios/kafkajs#683), so a slow partition would stall every partition led by the same broker. This runner
 * therefore takes a batch, returns at once, and works the batch in the background. The fetch position moves past
 * a batch when it is taken (kafkajs `resolveOffset`; offsets are committed by this runner, never by kafkajs), so
 * the partition stays in the fetches while its batch runs and its next batch is at hand the moment the current one
 * ends: a record arriving meanwhile does not wait for a fetch that left its partition out (up to the fetch wait,
 * once per step of a workflow whose steps share a key). One batch per partition waits that way; with one waiting,
 * the partition is paused until it starts. Guarantees (a message is identified by topic, partition, offset):
 * - Messages with the same key in a partition run one at a time, in offset order; a partition's next batch starts
 *   only after its current one is done, so order also holds across batches.
 * - Different keys run concurrently, bounded per partition and per process; when a bound is hit, dispatching
 *   from that partition waits (counted as paused) and resumes as work drains. Memory stays bounded by two fetches
 *   per partition (the running batch and the one waiting), and other partitions keep flowing.
 * - Only the contiguous completed prefix is committed (next offset to read), and only for a partition this member
 *   owns in the current generation, never during a rebalance; one commit in flight per partition, each above the
 *   last, those asked for meanwhile coalesced into one of the highest, and no batch waits for its commit (the
 *   partition's next batch starts while it is in flight; stop() waits for the commits asked for).
 * - A handler rejection is retried with backoff and never skipped (once stop() is called it is given up instead,
 *   with the rest of its key, uncommitted). After a
 *   rebalance, a partition whose old batch is still running stays paused until it is done; a revoked partition's
 *   in-flight work finishes without commit (its new owner redelivers it, and the idempotency lease keeps the two
 *   from running one task at once).
 * - The member heartbeats while batches run, so a handler longer than the session timeout causes no rebalance.
 * - stop(deadlineMs) stops taking batches, aborts each handler's `draining` signal (work not started yet stays
 *   unstarted; a handler rejecting from then on is not retried in place), lets in-flight work finish until the
 *   deadline, then aborts it (uncommitted work is redelivered), commits what completed, and leaves the group.
 */
export class OrderedConsumer {
  private readonly o: Resolved;
  private consumer?: Consumer;
  private readonly processSlots: Semaphore;
  private readonly stopController = new AbortController();
  /** Aborted when stop() is called (see HandleContext.draining). */
  private readonly drainController = new AbortController();
  private inFlight = 0;
  private readonly blocked = new Set<string>();
  private assigned = 0;
  private committedTotal = 0;
  private joins = 0;
  private crashed?: Error;
  private crashListeners: Array<(e: Error) => void> = [];
  private readonly assignment = new Set<string>();
  /** Per partition, bumped whenever a join leaves it out: a batch from an older epoch is abandoned for good. */
  private readonly epochs = new Map<string, number>();
  private rebalancing = false;
  private stopping = false;
  private readonly busy = new Set<string>();
  /** Per partition, the batch taken while its current one runs (at most one), and the epoch it was taken in. */
  private readonly pending = new Map<
    string,
    { p: EachBatchPayload; messages: EachBatchPayload['batch']['messages']; epoch: number }
  >();
  /**
   * Per partition, the last offset handed to a batch in its current epoch. A rejoin moves kafkajs's fetch position
   * back to the committed offset; what comes again up to here is already running or done, and is left out.
   */
  private readonly taken = new Map<string, bigint>();
  private readonly background = new Set<Promise<void>>();
  /** Per partition, its offset commits (see {@link commitInOrder}). */
  private readonly commits = new Map<string, PartitionCommits>();
  /** Aborted by stop(): a commit waiting out commitIntervalMs is sent at once (see {@link commitInOrder}). */
  private readonly commitNow = new AbortController();
  /** Per partition, aborts the handlers of its current batch when the partition is revoked. */
  private readonly revokers = new Map<string, AbortController>();
  private heartbeatTimer?: NodeJS.Timeout;
  private lastPayload?: EachBatchPayload;
  private readonly quarantine: PartitionQuarantine;

  constructor(opts: OrderedConsumerOptions) {
    this.o = resolveOptions(opts);
    if (this.o.heartbeatIntervalMs * 3 > this.o.sessionTimeoutMs)
      throw new Error(
        `heartbeatIntervalMs (${this.o.heartbeatIntervalMs}) must be at most a third of sessionTimeoutMs (${this.o.sessionTimeoutMs})`,
      );
    this.processSlots = new Semaphore(this.o.maxInFlight);
    // One listener per batch in progress (one per assigned partition at most), each removed when its batch ends.
    setMaxListeners(0, this.stopController.signal);
    // One listener per task waiting for a slot of its own (e.g. the worker's handler slots), each removed when it ends.
    setMaxListeners(0, this.drainController.signal);
    // One listener per partition whose commit waits out commitIntervalMs (see commitInOrder), each removed when it ends.
    setMaxListeners(0, this.commitNow.signal);
    this.quarantine = new PartitionQuarantine({
      component: this.o.component,
      logger: this.o.logger,
      health: this.o.health,
      registry: this.o.registry,
      retryMs: this.o.undecodableRetryMs,
      partitions: {
        pause: (topic, partition) => this.pausePartition(`${topic}:${partition}`),
        resume: (topic, partition) => {
          const tp = `${topic}:${partition}`;
          if (!this.stopping && this.assignment.has(tp) && !this.busy.has(tp)) this.resumePartition(tp);
        },
      },
    });
  }

  /** Called when the consumer crashed and kafkajs will not restart it: the process should exit non-zero. */
  onCrash(listener: (e: Error) => void): void {
    this.crashListeners.push(listener);
  }

  stats(): ConsumerStats {
    return {
      inFlight: this.inFlight,
      pausedPartitions: this.blocked.size,
      assigned: this.assigned,
      committedTotal: this.committedTotal,
      joins: this.joins,
      quarantined: this.quarantine.list(),
      prefetched: this.pending.size,
      crashed: this.crashed,
    };
  }

  /** Joins the group and starts consuming. Resolves once the consumer runs (not when the group is joined). */
  async start(): Promise<void> {
    // The wait below is a function, which only the patched kafkajs asks (unpatched, a fetch would wait 0 ms and
    // never time out): refused here as well as in createKafka, since any Kafka instance may be handed in.
    assertKafkajsPatched();
    const fetchWait = () => this.fetchWaitMs(c);
    const c: Consumer = this.o.kafka.consumer({
      groupId: this.o.groupId,
      sessionTimeout: this.o.sessionTimeoutMs,
      heartbeatInterval: this.o.heartbeatIntervalMs,
      rebalanceTimeout: this.o.rebalanceTimeoutMs,
      maxBytesPerPartition: this.o.maxBytesPerPartition,
      maxWaitTimeInMs: fetchWait as unknown as number, // kafkajs's type says number; the patch takes a function
      readUncommitted: false,
      retry: { retries: 10 },
      // Members with different subscriptions (workers of different task types) may share a group: each gets only
      // its own topics. kafkajs's round robin stays as a fallback so a rolling upgrade from it can join.
      partitionAssigners: [subscribedRoundRobinAssigner, PartitionAssigners.roundRobin],
    });
    this.consumer = c;
    c.on(c.events.REBALANCING, () => {
      this.rebalancing = true;
    });
    c.on(c.events.GROUP_JOIN, (e) => {
      this.joins++;
      this.rebalancing = false;
      const before = new Set(this.assignment);
      this.assignment.clear();
      for (const [topic, ps] of Object.entries(e.payload.memberAssignment))
        ps.forEach((p) => this.assignment.add(`${topic}:${p}`));
      // A partition lost in this generation may have been processed by another member meanwhile, even if it comes
      // back later: batches started before must neither dispatch, resolve nor commit again.
      for (const tp of before)
        if (!this.assignment.has(tp)) {
          this.epochs.set(tp, (this.epochs.get(tp) ?? 0) + 1);
          this.pending.delete(tp);
          this.taken.delete(tp);
          this.revokers.get(tp)?.abort(new PartitionRevokedError(tp));
          this.quarantine.drop(...splitTp(tp));
        }
      // A partition gained in this join starts afresh: what this member took of it before (in an older generation,
      // or from a fetch answered after it was revoked) says nothing about its committed position now.
      for (const tp of this.assignment)
        if (!before.has(tp)) {
          this.taken.delete(tp);
          this.pending.delete(tp);
        }
      this.assigned = this.assignment.size;
      // A partition still working on a batch from before the rebalance stays paused until that batch is done.
      // Every other assigned partition is resumed: kafkajs keeps a partition's paused flag across rebalances, so
      // one paused while busy, revoked, and assigned back later would otherwise never be fetched again.
      for (const tp of this.assignment) {
        if (this.busy.has(tp) || this.quarantine.has(...splitTp(tp))) this.pausePartition(tp);
        else this.resumePartition(tp);
      }
      this.o.logger.info(
        { groupId: this.o.groupId, assignment: e.payload.memberAssignment, generation: e.payload.groupId },
        'joined consumer group',
      );
    });
    c.on(c.events.CRASH, (e) => {
      this.o.logger.error(
        {
          err: e.payload.error,
          restart: e.payload.restart,
          groupId: this.o.groupId,
          // kafkajs's fetch parser cannot say which partition an undecodable batch is on: one of these.
          ...(e.payload.error instanceof UndecodableBatchError ? { assignment: [...this.assignment] } : {}),
        },
        'consumer crashed',
      );
      if (!e.payload.restart) {
        this.crashed = e.payload.error;
        this.crashListeners.forEach((l) => l(e.payload.error));
      }
    });
    await connectUntilAnswered(c, { what: `consumer ${this.o.groupId}`, logger: this.o.logger });
    for (const topic of this.o.topics) await subscribeWhenReady(c, topic, this.o.fromBeginning);
    await c.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: this.o.partitionsConsumedConcurrently,
      eachBatch: async (payload) => this.takeBatch(payload),
    });
    // Heartbeats while batches run in the background (kafkajs only heartbeats from its fetch loop and batches).
    this.heartbeatTimer = setInterval(
      () => {
        if (this.busy.size > 0) this.lastPayload?.heartbeat().catch(() => undefined);
      },
      Math.max(200, Math.floor(this.o.heartbeatIntervalMs / 2)),
    );
    this.heartbeatTimer.unref();
  }

  /**
   * The wait of `c`'s next fetch at the broker, in ms, asked before each fetch (keyflow's kafkajs patch, "wait chosen
   * per fetch"): a partition paused for its next batch is left out of the fetch, so its records wait for the next
   * one, at most fetchMaxWaitMs away; with none paused every partition is in the fetch and the broker answers it as
   * soon as a record arrives, so a long wait (idleFetchMaxWaitMs) costs no latency. A partition held by the
   * quarantine (an undecodable batch, a registry away) waits seconds for its retry, not for a fetch: it does not
   * shorten the wait.
   */
  private fetchWaitMs(c: Consumer): number {
    const short = this.o.fetchMaxWaitMs;
    const busy = c
      .paused()
      .some(({ topic, partitions }) => partitions.some((p) => !this.quarantine.has(topic, p)));
    return busy ? short : Math.max(this.o.idleFetchMaxWaitMs, short);
  }

  private pausePartition(tp: string): void {
    this.pauseOrResume('pause', tp);
  }

  private resumePartition(tp: string): void {
    this.pauseOrResume('resume', tp);
  }

  /**
   * Pauses or resumes one partition. Between a kafkajs consumer crash it restarts from (e.g. a broker gone:
   * KafkaJSNumberOfRetriesExceeded) and the restart, kafkajs has no consumer group and `pause`/`resume` throw
   * "Consumer group was not initialized" (kafkajs 2.2.4 src/consumer/index.js); a batch finishing in that window
   * must not throw out of its `finally` (an uncaught exception ends the process). Nothing is lost by skipping: the
   * restarted group has no paused partitions, and its GROUP_JOIN handler above pauses every busy partition again.
   */
  private pauseOrResume(op: 'pause' | 'resume', tp: string): void {
    const [topic, partition] = splitTp(tp);
    try {
      this.consumer?.[op]([{ topic, partitions: [partition] }]);
    } catch (err) {
      if (!isConsumerGroupNotInitialized(err)) throw err;
      this.o.logger.debug({ tp, op }, 'consumer restarting after a crash: the rejoin pauses busy partitions');
    }
  }

  /**
   * Takes a batch and returns at once: it runs in the background (see the class doc), or waits for the batch its
   * partition is running. What a rejoin fetches again up to the last offset taken is left out.
   */
  private takeBatch(p: EachBatchPayload): void {
    const tp = `${p.batch.topic}:${p.batch.partition}`;
    this.lastPayload = p;
    // A fetch answered after its partition was revoked (a rejoin kafkajs makes from inside a fetch does not stop the
    // other fetches), or fetched before a seek: neither taken nor resolved.
    if (!this.assignment.has(tp) || p.isStale()) return;
    if (this.stopping || (this.busy.has(tp) && this.pending.has(tp))) {
      this.pausePartition(tp); // nothing resolved for this batch: fetched again once the partition resumes
      return;
    }
    const after = this.taken.get(tp);
    // Offsets ascend within a batch: only a batch that starts at or before `after` (a refetch) needs filtering.
    const all = p.batch.messages;
    const fresh =
      after === undefined || (all.length > 0 && BigInt(all[0].offset) > after)
        ? all
        : all.filter((m) => BigInt(m.offset) > after);
    // A stand-in for a batch no codec could decode: work what comes before it, then keep the partition paused.
    const bad = undecodableAt(fresh);
    const messages = bad ? fresh.slice(0, bad.index) : fresh;
    if (bad) this.quarantine.add(p.batch.topic, p.batch.partition, bad.batch);
    else if (fresh.length > 0) this.quarantine.ok(p.batch.topic, p.batch.partition);
    if (messages.length === 0) {
      if (after !== undefined && !bad) {
        // Only what was taken before came again (a rejoin moved the fetch position back): fetch on from after it.
        p.resolveOffset(after.toString());
        // With nothing running or waiting, all of it is done; a commit skipped in the rebalance is made now.
        if (!this.busy.has(tp) && !this.rebalancing && this.assignment.has(tp)) {
          this.commitInOrder(
            p.batch.topic,
            p.batch.partition,
            (after + 1n).toString(),
            this.epochs.get(tp) ?? 0,
          );
        }
      }
      return;
    }
    const last = messages[messages.length - 1].offset;
    this.taken.set(tp, BigInt(last));
    // Never past what is taken (so not past an undecodable batch): fetching goes on from the next offset.
    p.resolveOffset(last);
    const epoch = this.epochs.get(tp) ?? 0;
    if (this.busy.has(tp)) {
      this.pending.set(tp, { p, messages, epoch });
      this.pausePartition(tp); // one batch waits; the partition resumes when it starts
      return;
    }
    this.startBatch(tp, p, messages, epoch);
  }

  private startBatch(
    tp: string,
    p: EachBatchPayload,
    messages: EachBatchPayload['batch']['messages'],
    epoch: number,
  ): void {
    this.busy.add(tp);
    const work = this.runBatch(p, messages, epoch)
      .catch((err) => {
        this.o.logger.error({ err, tp }, 'batch processing failed; its partition will be refetched');
        return err instanceof BatchFailedError ? err.firstOpen : undefined;
      })
      .then((firstOpen) => {
        this.busy.delete(tp);
        this.background.delete(work);
        const next = this.pending.get(tp);
        this.pending.delete(tp);
        if (this.stopping || !this.assignment.has(tp)) return;
        // A batch of an older epoch (the partition was revoked and came back) neither seeks nor commits; a batch
        // taken in the current epoch may be waiting behind it.
        const current = this.epochs.get(tp) ?? 0;
        if (firstOpen !== undefined && epoch === current) {
          // What this batch left undone, and the batch waiting behind it, are fetched again from there.
          this.taken.delete(tp);
          const [topic, partition] = splitTp(tp);
          try {
            this.consumer?.seek({ topic, partition, offset: firstOpen });
          } catch (err) {
            // Between a kafkajs crash and its restart there is no group to seek in; the restart fetches from the
            // committed offset, which is at most firstOpen, and `taken` is cleared, so nothing is skipped.
            this.o.logger.debug({ err, tp }, 'seek after a failed batch skipped: the consumer is restarting');
          }
        } else if (next && next.epoch === current) this.startBatch(tp, next.p, next.messages, next.epoch);
        if (!this.quarantine.has(...splitTp(tp))) this.resumePartition(tp);
      });
    this.background.add(work);
  }

  /** The group member is healthy: started, not crashed. */
  healthy(): boolean {
    return this.consumer !== undefined && this.crashed === undefined;
  }

  /**
   * Stops fetching, waits for in-flight work up to `deadlineMs`, then aborts what is left (it is not committed
   * and will be redelivered), commits the completed prefix and leaves the group. The offset commits asked for are
   * awaited up to what is left of the deadline once the work has settled, and at least STOP_COMMIT_GRACE_MS (or the
   * whole deadline when it is shorter): one never answered is left (its messages may be redelivered).
   */
  async stop(deadlineMs = 30_000): Promise<void> {
    if (!this.consumer) return;
    this.stopping = true;
    this.drainController.abort(new ConsumerStoppingError(this.o.groupId));
    this.commitNow.abort();
    const startedAt = Date.now();
    const timer = setTimeout(
      () => this.stopController.abort(new Error(`drain deadline of ${deadlineMs} ms passed`)),
      deadlineMs,
    );
    let commitTimer: NodeJS.Timeout | undefined;
    try {
      await Promise.allSettled([...this.background]);
      // The commits asked for (the last ones by the work that settled just now), up to what is left of the deadline,
      // and at least a grace: one the coordinator never answers (slow, or gone) must not hold a deploy's stop; left
      // unanswered it only means redelivery of completed work.
      const waitMs = Math.max(
        deadlineMs - (Date.now() - startedAt),
        Math.min(STOP_COMMIT_GRACE_MS, deadlineMs),
      );
      const bound = new Promise<'passed'>((r) => (commitTimer = setTimeout(() => r('passed'), waitMs)));
      const loops = Promise.allSettled([...this.commits.values()].map((c) => c.loop));
      if ((await Promise.race([loops, bound])) === 'passed')
        this.o.logger.warn(
          { groupId: this.o.groupId, deadlineMs, waitedMs: waitMs },
          'offset commits still unanswered after the drain (its deadline, or a grace past it); leaving the group without them (completed messages may be redelivered)',
        );
      await this.consumer.stop();
      await this.consumer.disconnect();
    } finally {
      clearTimeout(timer);
      clearTimeout(commitTimer);
      clearInterval(this.heartbeatTimer);
      this.quarantine.close();
      this.stopController.abort(new Error('consumer stopped'));
    }
  }

  private async runBatch(
    p: EachBatchPayload,
    messages: EachBatchPayload['batch']['messages'],
    epoch: number,
  ): Promise<void> {
    const { batch } = p;
    const tp = `${batch.topic}:${batch.partition}`;
    const tracker = new OffsetTracker(messages.map((m) => m.offset));
    const partitionSlots = new Semaphore(this.o.maxInFlightPerPartition);
    const chains = new Map<string, Promise<boolean>>();

    const revoker = new AbortController();
    this.revokers.set(tp, revoker);
    const link = linkSignals([this.stopController.signal, revoker.signal]);
    const signal = link.signal;
    // Every in-flight message of the batch listens on it (up to maxInFlightPerPartition at once, each removed when
    // its message is done): not a leak, and Node's default warning at 11 listeners printed on every busy batch.
    setMaxListeners(0, signal);
    const lost = () =>
      (this.epochs.get(tp) ?? 0) !== epoch || (!this.assignment.has(tp) && !this.rebalancing);
    const commit = this.batchCommitter(batch, tracker, epoch);
    // One of each per batch, shared by its messages: the first delivery's HandleContext (a retry makes its own),
    // frozen, so a handler cannot change what the batch's other messages are told.
    const run: BatchRun = {
      tp,
      lost,
      signal,
      tracker,
      commit,
      partitionSlots,
      first: Object.freeze({
        signal,
        shutdown: this.stopController.signal,
        draining: this.drainController.signal,
        redeliveries: 0,
      }),
    };

    try {
      // Handlers never run inside takeBatch (the batch is in `background` before any starts, so stop() waits for it).
      await Promise.resolve();
      for (let i = 0; i < messages.length; i++) {
        const m = messages[i];
        if (this.stopping || lost() || this.stopController.signal.aborted) break;
        // Both slots free (the common case): taken without a turn of the event loop.
        const partitionSlot = partitionSlots.tryAcquire();
        if (!partitionSlot || !this.processSlots.tryAcquire()) {
          this.blocked.add(tp);
          if (!partitionSlot) await partitionSlots.acquire();
          await this.processSlots.acquire();
          this.blocked.delete(tp);
        }
        if (this.stopping || lost()) {
          partitionSlots.release();
          this.processSlots.release();
          break;
        }
        this.inFlight++;
        this.chainMessage(chains, batch, m, i, run);
      }
      // Every chain settles before the batch ends, also when one fails: the partition's next work must not start
      // beside messages of this batch still running.
      const settled = await Promise.allSettled(chains.values());
      const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
      commit(true);
    } catch (err) {
      throw new BatchFailedError(tp, tracker.committable() ?? messages[0].offset, err);
    } finally {
      this.blocked.delete(tp);
      if (this.revokers.get(tp) === revoker) this.revokers.delete(tp);
      link.dispose();
    }
  }

  /** Whether this member owns partition `tp` in `epoch`, outside a rebalance: only then may it commit for it. */
  private ownedIn(tp: string, epoch: number): boolean {
    return (this.epochs.get(tp) ?? 0) === epoch && this.assignment.has(tp) && !this.rebalancing;
  }

  /**
   * The commit of a batch's completed prefix (its tracker's committable offset): asked for at most every
   * commitIntervalMs while the batch runs, and always (`force`) when it ends; only while the partition is this
   * member's in `epoch`. {@link commitInOrder} sends at most one OffsetCommit per partition per commitIntervalMs.
   * Nothing waits for it: the partition's next batch starts while it is in flight.
   */
  private batchCommitter(
    batch: EachBatchPayload['batch'],
    tracker: OffsetTracker,
    epoch: number,
  ): (force: boolean) => void {
    const tp = `${batch.topic}:${batch.partition}`;
    let lastCommit = Date.now();
    return (force: boolean) => {
      const next = tracker.committable();
      if (next === undefined || !this.ownedIn(tp, epoch)) return;
      if (!force && Date.now() - lastCommit < this.o.commitIntervalMs) return;
      lastCommit = Date.now();
      this.commitInOrder(batch.topic, batch.partition, next, epoch);
    };
  }

  /**
   * Asks for `offset` (the next offset to read) to be committed for its partition in `epoch`. Each partition has one
   * commit loop: one OffsetCommit in flight at most, always of the highest offset asked for meanwhile (asks that
   * arrive while one is in flight coalesce into the next), sent only while the partition is still this member's in
   * that epoch ({@link ownedIn}) and only above the last offset sent in it, so commits never reorder or move back; a
   * new epoch's loop starts after the previous epoch's. A failed commit is logged, not thrown or retried here (it only
   * means redelivery of completed work, which the idempotency layer absorbs; the next ask commits past it).
   * stop() waits for every loop before leaving the group.
   *
   * Not awaited by the batch: an OffsetCommit is answered once the group coordinator has appended it to
   * __consumer_offsets, which on Kafka 4 waits for `group.coordinator.append.linger.ms` (KIP-848's coordinator
   * runtime; 5.5 ms p50 measured on the local broker); a partition held busy for that held its next record (a
   * workflow's next step, keyed like the last) as long.
   *
   * At most one OffsetCommit per partition per commitIntervalMs: an ask within the interval after the last commit
   * waits out the rest of it, and the asks meanwhile go out as one commit of the highest (stop() sends a waiting one
   * at once). Without it a partition of one-record batches (each task of a run at low load) committed after every
   * record: 60 OffsetCommits a second from one worker at 20 runs/s, each an append to __consumer_offsets and a request
   * on the consumer's connection, which the broker answers one at a time. Completed work not yet committed when the
   * partition moves is redelivered, as with kafkajs's own autoCommitInterval; the idempotency layer absorbs it.
   */
  private commitInOrder(topic: string, partition: number, offset: string, epoch: number): void {
    const tp = `${topic}:${partition}`;
    let c = this.commits.get(tp);
    if (c && epoch < c.epoch) return; // a batch of an epoch the partition has left since: never committed
    if (!c || c.epoch !== epoch) {
      c = { epoch, sent: -1n, sentAt: 0, running: false, loop: c?.loop ?? Promise.resolve() };
      this.commits.set(tp, c);
    }
    const at = BigInt(offset);
    if (c.wanted === undefined || at > c.wanted) c.wanted = at;
    if (c.running) return;
    c.running = true;
    const entry = c;
    entry.loop = entry.loop.then(async () => {
      try {
        while (entry.wanted !== undefined) {
          const wait = entry.sentAt + this.o.commitIntervalMs - Date.now();
          if (wait > 0) await abortableSleep(wait, this.commitNow.signal);
          const w = entry.wanted;
          entry.wanted = undefined;
          if (w <= entry.sent || !this.ownedIn(tp, entry.epoch)) continue;
          try {
            entry.sentAt = Date.now();
            await this.consumer!.commitOffsets([{ topic, partition, offset: w.toString() }]);
            entry.sent = w;
            this.committedTotal++;
          } catch (err) {
            this.o.logger.warn(
              { err, tp, offset: w.toString() },
              'offset commit failed; completed messages may be redelivered',
            );
          }
        }
      } finally {
        entry.running = false;
      }
    });
  }

  /**
   * Runs message `m` (at position `index` of the batch) after the earlier messages of its key (`chains`, per key the
   * last one's promise), with retries ({@link runMessage}), then marks it complete and commits; releases its two
   * slots when it is done. The first message of a key in the batch starts at once, without waiting a turn.
   */
  private chainMessage(
    chains: Map<string, Promise<boolean>>,
    batch: EachBatchPayload['batch'],
    m: EachBatchPayload['batch']['messages'][number],
    index: number,
    run: BatchRun,
  ): void {
    const message: ConsumedMessage = {
      topic: batch.topic,
      partition: batch.partition,
      offset: m.offset,
      key: m.key ?? null,
      value: m.value ?? null,
      headers: m.headers ?? {},
      timestamp: m.timestamp,
    };
    // A null key has no order to keep: it gets a chain of its own. Each link resolves true when its message was
    // handled; a message given up (the consumer stops, the partition is lost) gives up the rest of its key, so
    // none of them runs ahead of it.
    const key = m.key ? m.key.toString('latin1') : `\u0000offset:${m.offset}`;
    const previous = chains.get(key);
    chains.set(
      key,
      previous
        ? previous.then((handledBefore) => this.runMessage(message, index, run, handledBefore))
        : this.runMessage(message, index, run, true),
    );
  }

  /**
   * Handles one message of a batch (when `handledBefore`: the earlier messages of its key were), retried in place
   * while it rejects ({@link retryMessage}); marks it complete and asks for a commit when handled; releases its
   * slots whatever happens. @returns true when handled (committable), false when given up (the consumer stops,
   * the partition was lost, or an earlier message of its key was given up).
   */
  private async runMessage(
    m: ConsumedMessage,
    index: number,
    run: BatchRun,
    handledBefore: boolean,
  ): Promise<boolean> {
    try {
      if (!handledBefore || run.signal.aborted || run.lost()) return false;
      let done = true;
      const since = Date.now();
      try {
        await this.o.handle(m, run.first);
      } catch (err) {
        done = await this.retryMessage(m, run, err, since);
      }
      if (done && run.tracker.complete(index) !== undefined) run.commit(false);
      return done;
    } finally {
      this.inFlight--;
      run.partitionSlots.release();
      this.processSlots.release();
    }
  }

  /**
   * Retries a message whose first delivery (begun at `since`, epoch ms) rejected with `firstError`, with backoff,
   * until it is handled or given up. @returns true when handled (committable), false when abandoned because the
   * consumer stops or lost the partition.
   */
  private async retryMessage(
    m: ConsumedMessage,
    run: BatchRun,
    firstError: unknown,
    since: number,
  ): Promise<boolean> {
    const { tp, lost: isStale, signal } = run;
    // A message retried past retryingDegradedAfterMs (a registry or broker outage) is named in /health until it
    // is handled or abandoned; its partition is held meanwhile (its batch is not done) and nothing is skipped.
    const condition = `${this.o.component}:${tp}:retrying`;
    let degraded = false;
    let err = firstError;
    try {
      for (let failures = 0; ; failures++) {
        // Stopping: not retried in place; left uncommitted, so it is redelivered (see HandleContext.draining).
        if (this.stopping) return false;
        this.blocked.add(tp);
        const delay = backoffDelayMs(this.o.infraRetry, Math.min(failures + 1, 30));
        const e = err as Error & { code?: string };
        if (Date.now() - since >= this.o.retryingDegradedAfterMs) {
          degraded = true;
          this.o.health?.degrade(condition, {
            code: String(e.code ?? e.name),
            error: `${tp} offset ${m.offset} has been retried for ${Date.now() - since} ms (${failures + 1} tries; nothing is skipped or dead-lettered for it): ${e.message}`,
          });
        }
        this.o.logger.warn(
          {
            err,
            topic: m.topic,
            partition: m.partition,
            offset: m.offset,
            failures: failures + 1,
            retryInMs: delay,
            host: hostname(),
          },
          'message could not be handled; retrying in place (its key waits, nothing is skipped)',
        );
        await abortableSleep(delay, signal);
        if (signal.aborted || isStale()) return false;
        try {
          await this.o.handle(m, {
            signal,
            shutdown: this.stopController.signal,
            draining: this.drainController.signal,
            redeliveries: failures + 1,
          });
          this.blocked.delete(tp);
          return true;
        } catch (next) {
          err = next;
        }
      }
    } finally {
      if (degraded) this.o.health?.recover(condition);
    }
  }
}

/** What the messages of one running batch share (see OrderedConsumer.runBatch). */
interface BatchRun {
  tp: string;
  /** Whether the partition left this member (or its epoch) since the batch was taken. */
  lost: () => boolean;
  /** Aborted on stop past the deadline or on revocation (HandleContext.signal). */
  signal: AbortSignal;
  tracker: OffsetTracker;
  commit: (force: boolean) => void;
  partitionSlots: Semaphore;
  /** The HandleContext of every first delivery in the batch (redeliveries 0). */
  first: HandleContext;
}

/** One partition's commits in one epoch (see OrderedConsumer.commitInOrder). */
interface PartitionCommits {
  epoch: number;
  /** The highest offset committed in this epoch (-1 before the first). */
  sent: bigint;
  /** When the last OffsetCommit of this epoch was sent (epoch ms; 0 before the first). */
  sentAt: number;
  /** The highest offset asked for and not yet sent. */
  wanted?: bigint;
  /** Whether the loop is sending; asks meanwhile only raise `wanted`. */
  running: boolean;
  /** The loop's promise: a later epoch's loop, and stop(), wait for it. */
  loop: Promise<void>;
}
