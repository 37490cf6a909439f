import { Topic } from '@keyflow/schemas';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { CompressionTypes, writeCompression } from '@keyflow/kafka';
import { supersededExpiry, type ClaimCheck } from '@keyflow/blobs';
import type { EventCodec } from '@keyflow/contracts';
import type { Logger } from '@keyflow/observability';
import { segmentKey, TERMINAL, type RunState } from '@keyflow/workflow';
import type { OrchestratorConfig } from '../config';
import { forgottenRunBlobPrefixes } from './mapping';
import type { OrchestratorMetrics } from './metrics';
import type { RunReadModel } from './read-model';
import { dropRun, exclusively, type OwnedPartition } from './ownership';

/** At most this many ended runs, and this many wf.state tombstones (cores and segments), per partition per sweep. */
const FORGET_RUNS_PER_SWEEP = 1_000;
const FORGET_RECORDS_PER_SWEEP = 20_000;
/** Tombstones per produce request of the sweep's transaction (~100 bytes each before gzip). */
const FORGET_RECORDS_PER_REQUEST = 2_000;

/** What the retention sweeps need of the engine. */
export interface RetentionDeps {
  cfg: OrchestratorConfig;
  codec: EventCodec;
  claim: ClaimCheck;
  readModel: RunReadModel;
  metrics: OrchestratorMetrics;
  logger: Logger;
  /** The partitions owned now. */
  owned(): Iterable<OwnedPartition>;
  /** Whether the engine is stopping. */
  stopping(): boolean;
  /** Takes a partition over again after a failed transaction (a failed commit may leave its producer unusable). */
  retakeOver(o: OwnedPartition, err: unknown): void;
}

/**
 * The retention of ended runs: forgets the owned runs that ended more than ORCHESTRATOR_RUN_RETENTION_MS ago
 * (wf.state tombstones in a transaction of the partition's own producer), then gives their blobs an expiry.
 */
export class RetentionSweeper {
  constructor(private readonly d: RetentionDeps) {}

  /**
   * Forgets the owned runs that ended more than ORCHESTRATOR_RUN_RETENTION_MS ago: per partition, one transaction of
   * the partition's own producer (fenced like its batches, and serialised with them by the partition's lock) writes
   * a tombstone (null value) for each to wf.state, on the partition its snapshots are on; after the commit the
   * engine drops them, and every read model drops them when it reads the tombstone (compaction then removes the
   * key: Kafka docs "Log Compaction", a null value deletes). A failed transaction is handled like a failed batch
   * (abort, take the partition over again); the runs stay until the next sweep. At most FORGET_RUNS_PER_SWEEP runs
   * and FORGET_RECORDS_PER_SWEEP tombstones per transaction; a partition with more expired runs gets another
   * transaction at once, until none is left. The expired runs are read from the partition's index of ended runs in
   * end order (`o.ended`), so a sweep costs the runs it forgets, not the runs held.
   * Only the transaction holds the partition's lock: the forgotten runs' snapshot blobs are given their expiry (the
   * claim check's grace time) after it, outside the lock, once per run, yielding to the event loop between runs; the
   * sweep yields between partitions too, and stops between two runs when the engine stops.
   */
  async forgetEndedRuns(): Promise<void> {
    if (this.d.stopping()) return;
    const cutoff = Date.now() - this.d.cfg.ORCHESTRATOR_RUN_RETENTION_MS;
    const expired = (s: RunState | undefined) =>
      s !== undefined && TERMINAL.has(s.status) && (s.endedAt ?? s.updatedAt) <= cutoff;
    for (const o of [...this.d.owned()]) {
      // A sweep that reached its bounds goes on with the same partition at once (after a yield): forgetting keeps up
      // with runs that end faster than FORGET_RUNS_PER_SWEEP a sweep interval.
      for (;;) {
        if (this.d.stopping()) return;
        await yieldToLoop();
        const { runIds: found, more } = expiredRuns(o, cutoff, expired);
        if (found.length === 0) break;
        // A partition still being taken over (or whose take-over failed: its handler deals with that) waits.
        if (
          !(await o.ready.then(
            () => true,
            () => false,
          ))
        )
          break;
        // Checked again under the lock: a batch applied meanwhile (a retry) may have reopened one.
        let forgotten: string[] = [];
        await exclusively(o, async () => {
          forgotten = await this.forget(
            o,
            found.filter((id) => expired(o.runs.get(id))),
          );
        });
        await this.expireForgottenBlobs(forgotten);
        if (!more || forgotten.length === 0) break;
      }
    }
  }

  /**
   * One transaction of `o`'s producer: a wf.state tombstone for each of `runIds`; then they are dropped here.
   * @returns the runs forgotten (none when the transaction failed: the partition is taken over again)
   */
  private async forget(o: OwnedPartition, runIds: string[]): Promise<string[]> {
    if (o.revoked || this.d.stopping() || runIds.length === 0) return [];
    let tx: Awaited<ReturnType<typeof o.producer.transaction>> | undefined;
    try {
      tx = await o.producer.transaction();
      const keys = this.tombstoneKeys(o, runIds);
      // In requests of at most FORGET_RECORDS_PER_REQUEST tombstones, gzipped, so none exceeds the broker's
      // message.max.bytes (keys of segments are long: 1,000 runs of 10,000-item maps are 40,000 tombstones).
      for (let i = 0; i < keys.length; i += FORGET_RECORDS_PER_REQUEST)
        await tx.send({
          topic: this.d.codec.physical(Topic.WF_STATE),
          acks: -1,
          compression: writeCompression(CompressionTypes.GZIP),
          messages: keys
            .slice(i, i + FORGET_RECORDS_PER_REQUEST)
            .map((key) => ({ partition: o.partition, key, value: null })),
        });
      await tx.commit();
      tx = undefined;
    } catch (err) {
      await tx?.abort().catch(() => undefined);
      this.d.logger.warn(
        { err, partition: o.partition },
        'could not forget ended runs; retrying at the next sweep',
      );
      this.d.retakeOver(o, err);
      return [];
    }
    runIds.forEach((id) => dropRun(o, id));
    this.d.metrics.forgotten.inc(runIds.length);
    this.d.logger.info(
      { partition: o.partition, runs: runIds.length },
      'ended runs past their retention forgotten',
    );
    return runIds;
  }

  /** The wf.state keys of `runIds`: each run's map item segments first (`<run>/<map>/<k>`: see snapshotParts), then the run. */
  private tombstoneKeys(o: OwnedPartition, runIds: string[]): string[] {
    return runIds.flatMap((runId) => {
      const segments = new Set(this.d.readModel.segmentKeys(runId));
      for (const [mapId, st] of Object.entries(o.runs.get(runId)?.steps ?? {}))
        st.map?.segments.forEach((_, k) => segments.add(segmentKey(runId, mapId, k)));
      return [...segments, runId];
    });
  }

  /**
   * Gives the blobs the forgotten `runIds` may still hold without an expiry (their latest snapshot's and segments')
   * the claim check's grace time: after their tombstones' commit, outside any partition's lock, once per run, each
   * costing that run's blobs (the stores list the run's prefix, not the store). Yields between runs; at stop, the
   * runs left keep their blobs (bounded leak, logged). A store error is logged and the run's blobs stay.
   */
  private async expireForgottenBlobs(runIds: string[]): Promise<void> {
    const store = this.d.claim.store;
    if (!store || runIds.length === 0) return;
    const expiresAt = supersededExpiry(Date.now(), this.d.claim.o.graceMs);
    for (const [i, id] of runIds.entries()) {
      if (this.d.stopping()) {
        this.d.logger.warn(
          { runs: runIds.length - i },
          "stopping: forgotten runs' blobs left without an expiry",
        );
        return;
      }
      await yieldToLoop();
      for (const prefix of forgottenRunBlobPrefixes(id, this.d.readModel.sharesLegacyBlobPrefix(id)))
        await store
          .expire(prefix, expiresAt)
          .catch((err) => this.d.logger.warn({ err, runId: id }, "could not expire a forgotten run's blobs"));
    }
  }
}

/**
 * The ended runs of `o` past their retention (`expired`), at most FORGET_RUNS_PER_SWEEP runs and
 * FORGET_RECORDS_PER_SWEEP tombstones, read from the front of `o.ended` (the runs in the order they ended): costs the
 * runs it returns, never the runs held. `cutoff`: ms since epoch, the latest end time that is expired. `more`: it
 * stopped at those bounds (more may be expired).
 */
export function expiredRuns(
  o: Pick<OwnedPartition, 'runs' | 'ended'>,
  cutoff: number,
  expired: (s: RunState | undefined) => boolean,
): { runIds: string[]; more: boolean } {
  const found: string[] = [];
  let records = 0;
  for (let it = o.ended.begin(); !it.equals(o.ended.end()); it.next()) {
    const [key, runId] = it.pointer;
    if (Number(key.slice(0, key.indexOf('/'))) > cutoff) break;
    const s = o.runs.get(runId);
    if (!expired(s)) continue;
    found.push(runId);
    // A run's tombstones: its core and one per map item segment (a 100,000-item map has 391).
    records += 1 + Object.values(s!.steps).reduce((n, st) => n + (st.map?.segments.length ?? 0), 0);
    if (found.length >= FORGET_RUNS_PER_SWEEP || records >= FORGET_RECORDS_PER_SWEEP)
      return { runIds: found, more: true };
  }
  return { runIds: found, more: false };
}
