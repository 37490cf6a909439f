import { setTimeout as sleep } from 'node:timers/promises';
import { dlqOf, triggerTopic, Topic } from '@keyflow/schemas';
import {
  KafkaJSError,
  type Admin,
  type Consumer,
  type ConsumedMessage,
  type EachBatchPayload,
  type Kafka,
  type KafkaMessage,
  type Producer,
} from '@keyflow/kafka';
import type { EventCodec } from '@keyflow/contracts';
import { isRetryable } from '@keyflow/errors';
import type { Logger } from '@keyflow/observability';
import { TERMINAL, type RunState, type TriggerDefinition, type WorkflowDefinition } from '@keyflow/workflow';
import type { RunReadModel } from '../engine/read-model';
import { exclusively } from '../engine/ownership';
import type { TriggerMetrics } from './metrics';
import { readMarks } from './progress';
import { applied, triggerRecord, TriggerRecordError, type Applied } from './record';
import { SourcePartition, type Mark } from './source-partition';
import type { TriggerStatus } from './status';
import { commitTrigger, partitionProducer, TriggerOutputs } from './transaction';

/** What a trigger runner needs of the orchestrator. */
export interface TriggerDeps {
  kafka: Kafka;
  /** The shared admin client (set once the triggers' topics are set up). */
  admin(): Admin | undefined;
  codec: EventCodec;
  readModel: RunReadModel;
  logger: Logger;
  metrics: TriggerMetrics;
  /** The workflow a start trigger starts (the latest version registered here). */
  workflow(name: string): WorkflowDefinition | undefined;
  /** Group session timeout, ms. */
  sessionTimeoutMs: number;
  /** KEYFLOW_MAX_MESSAGE_BYTES. */
  maxMessageBytes: number;
  /** wf.requests' partition count (read once the triggers' topics are set up). */
  requestPartitions(): number;
  /** The engine's consumer group (ORCHESTRATOR_GROUP_ID): whose committed wf.requests offsets say what it applied. */
  engineGroup: string;
}

/** A record read and not applied yet: its message (for the DLQ), what it becomes, and since when it waits (ms). */
interface Pending {
  m: ConsumedMessage;
  a: Applied;
  since: number;
}

/** One partition the trigger reads (of its source topic or its own redrive topic). */
interface Part {
  topic: string;
  partition: number;
  part: SourcePartition<Pending>;
  producer: Producer;
  /** The last committed mark (what a failed transaction goes back to). */
  committed: Mark | undefined;
  ready: Promise<void>;
  lock: Promise<void>;
  revoked: boolean;
  /** End offset (last stable) at the last look, for lag. */
  end: bigint;
  releasing: boolean;
}

/** Delay of a partition read again after a failed transaction or a registry outage, ms (doubling, at most 10 s). */
const RETRY_MS = 200;
/** How often held records and in-flight runs are looked at again without a change of a run (ms). */
const SWEEP_MS = 1_000;
/** How often the lag of the assigned partitions is asked of the brokers (four admin requests per trigger), ms. */
const LAG_REFRESH_MS = 5_000;
/** How often a new owner of a partition asks whether the engine applied the previous owner's starts, ms. */
const ENGINE_POLL_MS = 200;
/** Reading resumes once in-flight runs and held records are below this share of maxInFlight. */
const RESUME_AT = 0.9;

/**
 * Runs one topic trigger on this instance: a consumer in the trigger's group (so the source topic's partitions are
 * shared by the instances), a transactional producer per assigned partition, and the per-key order and backpressure
 * (see docs/triggers.md). Each fetched batch is applied in one transaction with its mark and offsets; records held
 * behind their key's previous run go out in later transactions as the read model shows that run started (or ended,
 * `serializeBy: 'key'`).
 */
export class TriggerRunner {
  readonly group: string;
  readonly redriveTopic: string;
  readonly dlqTopic: string;
  private consumer?: Consumer;
  private readonly parts = new Map<string, Part>();
  /** Runs started here and not ended: run id -> the part that started it. */
  private readonly inFlight = new Map<string, Part>();
  /**
   * Runs written into a transaction not committed yet (any part), plus records being taken (decoded, mapped: a run
   * each at most): they count against maxInFlight too, so concurrently applied partitions do not overshoot it.
   */
  private uncommitted = 0;
  private paused = false;
  /** The partitions assigned now, by topic (the last GROUP_JOIN). */
  private assignment: Record<string, number[]> = {};
  /** Per assigned `<topic>/<partition>`, its lag and position at the last look (every LAG_REFRESH_MS). */
  private lags = new Map<string, { lag: number; position: bigint }>();
  /** When the lag was last asked of the brokers (ms since epoch). */
  private lagAskedAt = 0;
  private stopped = false;
  private sweep?: NodeJS.Timeout;
  private releaseSoon?: NodeJS.Immediate;
  private readonly counts = { applied: 0, deadLettered: 0, skippedReplay: 0 };

  constructor(
    readonly def: TriggerDefinition,
    private readonly d: TriggerDeps,
    topicPrefix: string,
  ) {
    this.group = `${topicPrefix}${def.group ?? `keyflow-trigger-${def.name}`}`;
    this.redriveTopic = d.codec.physical(triggerTopic(def.name));
    this.dlqTopic = d.codec.physical(dlqOf(triggerTopic(def.name)));
  }

  /** Starts reading (the source topic must exist: see TriggerRunners). @throws kafkajs errors */
  async start(): Promise<void> {
    const c = this.d.kafka.consumer({
      groupId: this.group,
      readUncommitted: false,
      allowAutoTopicCreation: false,
      sessionTimeout: this.d.sessionTimeoutMs,
      heartbeatInterval: Math.floor(this.d.sessionTimeoutMs / 5),
      maxWaitTimeInMs: 100,
    });
    this.consumer = c;
    c.on(c.events.GROUP_JOIN, (e) => this.assigned(e.payload.memberAssignment));
    await c.connect();
    await c.subscribe({ topics: [this.def.topic, this.redriveTopic], fromBeginning: true });
    await c.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: 4,
      eachBatch: (p) => this.onBatch(p),
    });
    this.sweep = setInterval(() => this.onSweep(), SWEEP_MS);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.sweep) clearInterval(this.sweep);
    if (this.releaseSoon) clearImmediate(this.releaseSoon);
    await this.consumer?.disconnect().catch(() => undefined);
    await Promise.all([...this.parts.values()].map((p) => this.drop(p)));
  }

  /** Drops the parts no longer assigned (their producers disconnect; the next owner's fences them anyway). */
  private assigned(assignment: Record<string, number[]>): void {
    this.assignment = assignment;
    const keep = new Set(Object.entries(assignment).flatMap(([topic, ps]) => ps.map((p) => `${topic}/${p}`)));
    for (const [id, p] of this.parts) if (!keep.has(id)) void this.drop(p);
  }

  private async drop(p: Part): Promise<void> {
    p.revoked = true;
    this.parts.delete(`${p.topic}/${p.partition}`);
    for (const [runId, owner] of this.inFlight) if (owner === p) this.inFlight.delete(runId);
    await p.lock.catch(() => undefined);
    await p.producer.disconnect().catch(() => undefined);
  }

  /** The part of a partition, made on its first batch: its producer fences the previous owner, then its mark is read. */
  private partOf(topic: string, partition: number): Part {
    const id = `${topic}/${partition}`;
    let p = this.parts.get(id);
    if (p) return p;
    const producer = partitionProducer(this.d.kafka, this.group, topic, partition);
    const made: Part = {
      topic,
      partition,
      part: new SourcePartition<Pending>(undefined),
      producer,
      committed: undefined,
      ready: Promise.resolve(),
      lock: Promise.resolve(),
      revoked: false,
      end: -1n,
      releasing: false,
    };
    made.ready = (async () => {
      await producer.connect(); // InitProducerId: fences the previous owner's transactions first
      const marks = await readMarks(this.d.kafka, this.d.codec, this.d.logger, {
        group: this.group,
        topic,
        partitions: [partition],
      });
      made.committed = marks.get(partition);
      made.part = new SourcePartition<Pending>(made.committed);
      if (this.def.kind === 'start') await this.engineApplied(made.committed?.requests ?? [], made);
    })();
    this.parts.set(id, (p = made));
    made.ready.catch((err) => {
      this.d.logger.warn(
        { err, trigger: this.def.name, topic, partition },
        'trigger partition could not start',
      );
      if (this.parts.get(id) === made) void this.drop(made);
    });
    return p;
  }

  /**
   * Waits until the engine has applied the requests the previous owner of a partition wrote (its committed wf.requests
   * offsets are past them): a key's next run then starts after its previous one, across a change of owner.
   */
  private async engineApplied(requests: NonNullable<Mark['requests']>, p: Part): Promise<void> {
    if (requests.length === 0) return;
    const topic = this.d.codec.physical(Topic.WF_REQUESTS);
    for (let waited = 0; !p.revoked && !this.stopped; waited += ENGINE_POLL_MS) {
      const admin = this.d.admin();
      const committed = admin
        ? await admin.fetchOffsets({ groupId: this.d.engineGroup, topics: [topic] })
        : [];
      const at = new Map((committed[0]?.partitions ?? []).map((c) => [c.partition, BigInt(c.offset)]));
      if (requests.every((r) => (at.get(r.partition) ?? -1n) > r.offset)) return;
      if (waited % 30_000 === 0 && waited > 0)
        this.d.logger.warn(
          { trigger: this.def.name, topic: p.topic, partition: p.partition, waitedMs: waited },
          "trigger partition waits for the engine to apply the previous owner's starts (is the engine running?)",
        );
      await sleep(ENGINE_POLL_MS);
    }
  }

  private async onBatch({
    batch,
    resolveOffset,
    heartbeat,
    isStale,
    isRunning,
  }: EachBatchPayload): Promise<void> {
    const p = this.partOf(batch.topic, batch.partition);
    const beat = setInterval(() => heartbeat().catch(() => undefined), 1_000);
    try {
      try {
        await p.ready;
      } catch (err) {
        throw new KafkaJSError(err as Error, { retriable: true });
      }
      if (isStale() || !isRunning() || p.revoked) return;
      p.end = BigInt(batch.highWatermark);
      let taken = 0;
      await exclusively(p, async () => {
        taken = await this.applyBatch(p, batch.messages, batch.topic, batch.partition);
      });
      // Records past `taken` (maxInFlight reached) stay unresolved: the consumer fetches them again once resumed.
      if (taken > 0) resolveOffset(batch.messages[taken - 1].offset);
    } finally {
      clearInterval(beat);
    }
    this.checkPressure();
  }

  /** An empty transaction's outputs for this trigger. */
  private outputs(): TriggerOutputs {
    const d = this.d;
    return new TriggerOutputs(this.def, d.codec, this.group, d.maxMessageBytes, d.requestPartitions());
  }

  /**
   * Applies a fetched batch in one transaction, up to where runs in flight and held records reach maxInFlight.
   * @returns how many of `messages` were read (applied, held, dead-lettered or skipped); 0 when it failed (the part
   *   was rewound)
   */
  private async applyBatch(
    p: Part,
    messages: KafkaMessage[],
    topic: string,
    partition: number,
  ): Promise<number> {
    const out = this.outputs();
    let skipped = 0;
    let taken = 0;
    try {
      for (const km of messages) {
        const m: ConsumedMessage = { ...km, topic, partition, headers: km.headers ?? {} };
        const o = BigInt(m.offset);
        if (p.part.appliedBefore(o)) {
          p.part.read(o);
          skipped++;
          taken++;
          continue;
        }
        if (this.load() >= this.def.maxInFlight) break;
        p.part.read(o);
        this.uncommitted++; // the slot of the run it may start, held while it is decoded
        try {
          await this.take(p, m, o, out);
        } finally {
          this.uncommitted--;
        }
        taken++;
      }
      await this.commit(p, out);
      this.counts.skippedReplay += skipped;
      if (skipped) this.d.metrics.records.inc({ trigger: this.def.name, outcome: 'skipped_replay' }, skipped);
      return taken;
    } catch (err) {
      await this.rewind(p, out, err);
      return 0;
    } finally {
      this.uncommitted -= out.started.length;
    }
  }

  /** One record read: dead-lettered, applied now, or held behind its key. @throws a retryable (registry) error */
  private async take(p: Part, m: ConsumedMessage, o: bigint, out: TriggerOutputs): Promise<void> {
    let a: Applied;
    try {
      const r = await triggerRecord(this.def, this.d.codec, m);
      a = applied(this.def, r, this.def.kind === 'start' ? this.workflowOrThrow() : undefined);
    } catch (err) {
      if (!(err instanceof TriggerRecordError) && isRetryable(err, true)) throw err;
      return out.deadLetter(m, err, Date.now());
    }
    const key = m.key === null ? null : m.key.toString('utf8');
    const pending: Pending = { m, a, since: Date.now() };
    if (p.part.mustWait(key, (id) => this.gateOpen(id))) return p.part.hold(key!, o, pending);
    const target = this.target(pending);
    if (target === 'wait') return p.part.hold(key ?? `\u0000${m.offset}`, o, pending);
    this.emit(p, key, pending, target, out);
  }

  private workflowOrThrow(): WorkflowDefinition {
    const name = (this.def as { workflow: string }).workflow;
    const w = this.d.workflow(name);
    if (!w)
      throw new TriggerRecordError('TRIGGER_RECORD_UNMAPPABLE', `workflow ${name} is not registered here`);
    return w;
  }

  /** Writes the record's request (or its dead letter) into `out`, and gates its key on the run it starts. */
  private emit(p: Part, key: string | null, r: Pending, target: string | Error, out: TriggerOutputs): void {
    if (target instanceof Error) return out.deadLetter(r.m, target, Date.now());
    try {
      out.apply(r.m, r.a, target);
    } catch (err) {
      if (!(err instanceof TriggerRecordError)) throw err;
      return out.deadLetter(r.m, err, Date.now());
    }
    if (r.a.kind === 'start') {
      p.part.gate(key, target);
      this.uncommitted++;
    }
  }

  /**
   * The run id a record's request goes to: a start's own, a signal's target when the read model knows it;
   * 'wait' while a signal's run has not appeared (up to awaitRunMs); an Error (TRIGGER_NO_SUCH_RUN) after that, or at
   * once for a run id whose run has ended.
   */
  private target(r: Pending): string | 'wait' | Error {
    if (r.a.kind === 'start') return this.mayStart(r.a) ? r.a.runId : 'wait';
    const t = r.a.target;
    const run =
      'runId' in t ? this.d.readModel.get(t.runId) : this.d.readModel.runByBusinessKey(t.businessKey);
    if (run && !TERMINAL.has(run.status)) return run.runId;
    const waited = Date.now() - r.since;
    const awaitMs = this.def.kind === 'signal' ? this.def.awaitRunMs : 0;
    if (!run || !('runId' in t)) {
      if (waited < awaitMs) return 'wait';
    }
    const what = 'runId' in t ? `run ${t.runId}` : `a running run with business key ${t.businessKey}`;
    return new TriggerRecordError(
      'TRIGGER_NO_SUCH_RUN',
      run ? `${what} has ended (${run.status})` : `no ${what} appeared within ${awaitMs} ms`,
    );
  }

  /**
   * `serializeBy: 'key'`: a run starts only when no other run with its business key is going (one run per key at a
   * time, across restarts: the read model knows the runs a previous owner started). Always true for `offset`.
   */
  private mayStart(a: Extract<Applied, { kind: 'start' }>): boolean {
    if (this.def.kind !== 'start' || this.def.serializeBy !== 'key') return true;
    const going = this.d.readModel.runByBusinessKey(a.businessKey);
    return !going || going.runId === a.runId;
  }

  /** Whether a key's next record may go: the run its previous record started has started (or ended: `key`). */
  private gateOpen(runId: string): boolean {
    const s = this.d.readModel.get(runId);
    if (!s) return false;
    return this.def.kind === 'start' && this.def.serializeBy === 'key' ? TERMINAL.has(s.status) : true;
  }

  /** Commits `out` with the part's mark; then counts, tracks the started runs in flight, remembers the mark. */
  private async commit(p: Part, out: TriggerOutputs): Promise<void> {
    if (p.revoked) throw new Error('partition revoked');
    if (!p.part.started) return;
    p.committed = await commitTrigger(
      p.producer,
      this.d.codec,
      { trigger: this.def.name, group: this.group, topic: p.topic, partition: p.partition },
      out,
      p.part,
    );
    this.counts.applied += out.applied;
    this.counts.deadLettered += out.dead.length;
    if (out.applied) this.d.metrics.records.inc({ trigger: this.def.name, outcome: 'applied' }, out.applied);
    if (out.dead.length)
      this.d.metrics.records.inc({ trigger: this.def.name, outcome: 'dead_lettered' }, out.dead.length);
    for (const runId of out.started) {
      const s = this.d.readModel.get(runId);
      if (!s || !TERMINAL.has(s.status)) this.inFlight.set(runId, p);
    }
  }

  /**
   * After a failed transaction (or a registry outage): the part goes back to its last committed mark, its held
   * records are dropped (they are read again), the gates of the failed transaction's runs are dropped, and the
   * consumer reads the partition again from the mark, after a pause.
   */
  private async rewind(p: Part, out: TriggerOutputs, err: unknown): Promise<void> {
    this.d.metrics.aborted.inc({ trigger: this.def.name });
    this.d.logger.warn(
      { err, trigger: this.def.name, topic: p.topic, partition: p.partition },
      'trigger transaction failed; the partition is read again from its last mark',
    );
    const fresh = new SourcePartition<Pending>(p.committed);
    fresh.copyGates(p.part, new Set(out.started));
    fresh.copyRequests(p.part);
    p.part = fresh;
    await sleep(RETRY_MS);
    // Nothing committed yet: no batch of the part was resolved, so the consumer fetches the same records again.
    const from = p.committed?.next;
    if (from === undefined || p.revoked || this.stopped) return;
    this.consumer?.seek({ topic: p.topic, partition: p.partition, offset: from.toString() });
  }

  /**
   * A run the read model read: its gate goes when open, held records of its key may go, an ended run leaves the
   * in-flight count.
   */
  runChanged(s: RunState): void {
    if (this.stopped) return;
    if (TERMINAL.has(s.status) && this.inFlight.delete(s.runId)) this.checkPressure();
    // A gate found open goes now, not when its key comes back (most keys never do).
    const gateOpen = (id: string) => this.gateOpen(id);
    for (const p of this.parts.values()) p.part.opened(s.runId, gateOpen);
    this.scheduleRelease();
  }

  private scheduleRelease(): void {
    if (this.releaseSoon || this.stopped) return;
    this.releaseSoon = setImmediate(() => {
      this.releaseSoon = undefined;
      for (const p of this.parts.values()) if (p.part.heldCount > 0) void this.release(p);
    });
  }

  /** Sends what may go of a part's held records, in transactions, until nothing more may. */
  private async release(p: Part): Promise<void> {
    if (p.releasing) return;
    p.releasing = true;
    try {
      await p.ready;
      await exclusively(p, async () => {
        for (;;) {
          if (p.revoked || this.stopped) return;
          const out = this.outputs();
          const items = p.part.release(
            (id) => this.gateOpen(id),
            (r) => this.target(r) !== 'wait',
          );
          if (items.length === 0) return;
          for (const h of items)
            this.emit(
              p,
              h.key.startsWith('\u0000') ? null : h.key,
              h.record,
              this.target(h.record) as string | Error,
              out,
            );
          try {
            await this.commit(p, out);
          } catch (err) {
            await this.rewind(p, out, err);
            return;
          } finally {
            this.uncommitted -= out.started.length;
          }
        }
      });
    } catch {
      // A part that could not start is dropped by partOf.
    } finally {
      p.releasing = false;
      this.checkPressure();
    }
  }

  /** Every second: held signals past their awaitRunMs, runs ended unseen, the pause; the lag every LAG_REFRESH_MS. */
  private onSweep(): void {
    for (const runId of this.inFlight.keys()) {
      const s = this.d.readModel.get(runId);
      if (s && TERMINAL.has(s.status)) this.inFlight.delete(runId);
    }
    this.scheduleRelease();
    this.checkPressure();
    if (Date.now() - this.lagAskedAt >= LAG_REFRESH_MS) {
      this.lagAskedAt = Date.now();
      void this.refreshEnds();
    }
  }

  /**
   * The lag of every assigned partition (read_committed end offset minus the group's position), those not fetched
   * yet (paused before their first batch) included: their position is the group's committed offset.
   */
  private async refreshEnds(): Promise<void> {
    const admin = this.d.admin();
    if (!admin) return;
    const lag = new Map<string, { lag: number; position: bigint }>();
    for (const topic of [this.def.topic, this.redriveTopic]) {
      const assigned = this.assignment[topic] ?? [];
      if (assigned.length === 0) continue;
      const [ends, committed] = await Promise.all([
        admin.fetchTopicOffsets(topic).catch(() => []),
        admin.fetchOffsets({ groupId: this.group, topics: [topic] }).catch(() => []),
      ]);
      const at = new Map((committed[0]?.partitions ?? []).map((c) => [c.partition, BigInt(c.offset)]));
      for (const e of ends) {
        if (!assigned.includes(e.partition)) continue;
        const p = this.parts.get(`${topic}/${e.partition}`);
        const end = BigInt(e.offset);
        if (p) p.end = end;
        const from = p?.committed?.next ?? at.get(e.partition) ?? -1n;
        const position = from >= 0n ? from : BigInt(e.low);
        lag.set(`${topic}/${e.partition}`, { lag: end > position ? Number(end - position) : 0, position });
      }
    }
    this.lags = lag;
  }

  /** Runs in flight (committed or being committed) plus records held: what maxInFlight bounds. */
  private load(): number {
    return this.inFlight.size + this.uncommitted + this.held();
  }

  private held(): number {
    let n = 0;
    for (const p of this.parts.values()) n += p.part.heldCount;
    return n;
  }

  /** Pauses reading at maxInFlight (runs in flight plus records held), resumes below RESUME_AT of it. */
  private checkPressure(): void {
    const c = this.consumer;
    if (!c || this.stopped) return;
    const load = this.load();
    const topics = [{ topic: this.def.topic }, { topic: this.redriveTopic }];
    if (!this.paused && load >= this.def.maxInFlight) {
      this.paused = true;
      c.pause(topics);
      this.d.logger.info({ trigger: this.def.name, load }, 'trigger paused: maxInFlight reached');
    } else if (this.paused && load < this.def.maxInFlight * RESUME_AT) {
      this.paused = false;
      c.resume(topics);
    }
  }

  /** What the ops API and the console show (see TriggerStatus). */
  status(): TriggerStatus {
    const partitions = Object.entries(this.assignment).flatMap(([topic, ps]) =>
      ps
        .map((partition) => {
          const p = this.parts.get(`${topic}/${partition}`);
          const seen = this.lags.get(`${topic}/${partition}`);
          const position = p?.committed?.next ?? seen?.position ?? -1n;
          return {
            topic,
            partition,
            lag: seen?.lag ?? 0,
            position: position.toString(),
            paused: this.paused,
            held: p?.part.heldCount ?? 0,
          };
        })
        .filter((x) => topic === this.def.topic || x.lag > 0 || x.held > 0),
    );
    return {
      name: this.def.name,
      kind: this.def.kind,
      topic: this.def.topic,
      group: this.group,
      target: this.def.kind === 'start' ? this.def.workflow : this.def.signal,
      inFlight: this.inFlight.size,
      maxInFlight: this.def.maxInFlight,
      held: this.held(),
      paused: this.paused,
      lag: partitions.reduce((n, p) => n + p.lag, 0),
      partitions,
      dlq: this.dlqTopic,
      counts: { ...this.counts },
    };
  }
}
