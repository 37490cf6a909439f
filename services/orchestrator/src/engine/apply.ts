import { Topic } from '@keyflow/schemas';
import type { IHeaders } from '@keyflow/kafka';
import { BlobError, PayloadTooLargeError, type ClaimCheck } from '@keyflow/blobs';
import {
  ContractError,
  unreadableResultAsFailure,
  type DecodedEvent,
  type EventCodec,
  type PayloadSerde,
} from '@keyflow/contracts';
import { trace, type Span } from '@opentelemetry/api';
import {
  contextFromRecord,
  traceContextOf,
  tracer,
  type Logger,
  type SpanLinks,
  type TraceContext,
} from '@keyflow/observability';
import {
  isParkedStart,
  PendingRuns,
  SIGNAL_BUFFER_FULL,
  stepStateOf,
  TERMINAL,
  UNPARK_TIMER,
  type Decision,
  type IgnoreReason,
  type ParentRef,
  type ParkedInput,
  type RunState,
  type WorkflowDefinition,
  type WorkflowInput,
} from '@keyflow/workflow';
import { isRetryable, KeyflowError } from '@keyflow/errors';
import type { OrchestratorConfig } from '../config';
import type { WorkflowRegistry } from '../workflows/registry';
import {
  encodeOutputs,
  encodeSnapshotRecords,
  refusedChildResult,
  toWorkflowInput,
  type LocalCommand,
  type OutputRecord,
} from './mapping';
import type { OrchestratorMetrics } from './metrics';
import { dropRun, holdRun, type OwnedPartition } from './ownership';
import type { OwnState } from './read-model';
import type { BatchOutputs, DeadLetter, InputRecord } from './commit';

/**
 * Apply, the engine's middle phase: each record of a batch decoded (the payload serde: Avro, then the claim-checked
 * output read back), turned into a reducer input, and reduced against the partition's pending run states; the
 * outputs encoded; what cannot be applied set aside for the DLQ. Nothing here writes to Kafka or moves the partition's
 * committed state: that happens after the commit ({@link BatchApply.settle}). See docs/architecture/engine.md.
 */

/** The spans of one engine batch (see Engine.tracedBatch). */
export interface BatchSpans {
  batch: Span;
  /** The batch span's links to its inputs' traces, within the SDK's link limit. */
  links: SpanLinks;
  applied: Span[];
}

/** What applying a batch needs of the engine. */
export interface ApplyDeps {
  cfg: OrchestratorConfig;
  codec: EventCodec;
  serde: PayloadSerde;
  claim: ClaimCheck;
  registry: WorkflowRegistry;
  logger: Logger;
  metrics: OrchestratorMetrics;
}

/** A record being applied, as parking and dead-lettering need it (made only on those paths). */
interface AtRecord {
  m: InputRecord;
  topic: string;
  logical: typeof Topic.WF_REQUESTS | typeof Topic.TASK_RESULTS;
  eventId: string;
  runId: string;
  state: RunState | undefined;
  now: number;
  /** The record decoded (set on the invalid-input path: a refused child StartRun fails its parent's step). */
  decoded?: DecodedEvent;
}

/**
 * One batch of one partition being applied. Snapshots: `per-batch` encodes each changed run's snapshot once, after
 * the batch's last input of it (a run's snapshot costs its size once per batch, not once per input); `per-input`
 * encodes one after every input, so that an input whose state cannot be encoded is dead-lettered alone.
 */
export class BatchApply implements BatchOutputs {
  readonly pending: PendingRuns;
  /** The input a run's snapshot is caused by: the batch's last applied input of the run. */
  private readonly causes = new Map<string, { eventId: string; at: number }>();
  /** The trace context each run's outputs carry (its last applied input's span), kept for its timers. */
  private readonly traces = new Map<string, TraceContext>();
  readonly records: OutputRecord[] = [];
  /** The local steps' commands of the applied inputs: handed to the local-step runner after the commit. */
  readonly local: LocalCommand[] = [];
  /** The local commands of the input being encoded (kept only once it is applied). */
  private encodedLocal: LocalCommand[] = [];
  readonly dlq: DeadLetter[] = [];
  private transitions = 0;
  private readonly started: string[] = [];
  private readonly finished: Array<{ workflow: string; status: string; ms: number }> = [];
  /** Schedule-to-result times of the results applied (observed after the commit). */
  private readonly latencies: Array<{
    taskType: string;
    ms: number;
    outcome: 'completed' | 'failed';
    retry: boolean;
  }> = [];
  private changed = new Map<string, RunState>();
  /** Parked StartRuns' runs whose start, applied at last, was dead-lettered: tombstoned on wf.state. */
  removed: string[] = [];
  private readonly definition: (name: string, version: number | null) => WorkflowDefinition | undefined;

  constructor(
    private readonly d: ApplyDeps,
    private readonly o: OwnedPartition,
    private readonly partition: number,
    private readonly snapshots: 'per-batch' | 'per-input',
    private readonly spans: BatchSpans,
  ) {
    this.pending = new PendingRuns((id) => o.runs.get(id), {
      signalBufferLimit: d.cfg.ORCHESTRATOR_SIGNAL_BUFFER_LIMIT,
    });
    this.definition = (name, v) => d.registry.get(name, v);
  }

  /**
   * Applies `messages` of `batchTopic` in order; before a run's input, that run's parked inputs once this instance
   * has their definition (taken out of the run's state and applied here first, in the order they came).
   * @throws ContractError (retryable) when the registry does not answer; the blob store's retryable errors; a
   *   snapshot's encoding error (per input: see {@link snapshotChanged})
   */
  async run(messages: InputRecord[], batchTopic: string): Promise<void> {
    const work = messages.map((m) => ({ m, topic: batchTopic }));
    const resultsTopic = this.d.codec.physical(Topic.TASK_RESULTS);
    for (let i = 0; i < work.length; i++) {
      const { m, topic } = work[i];
      const logical: AtRecord['logical'] = topic === resultsTopic ? Topic.TASK_RESULTS : Topic.WF_REQUESTS;
      let decoded: DecodedEvent;
      try {
        decoded = await this.d.serde.decode(logical, m.value, {
          topic,
          partition: this.partition,
          offset: m.offset,
        });
      } catch (err) {
        if (err instanceof ContractError && !err.retryable) {
          this.dlq.push({ m, err, topic });
          continue;
        }
        throw err;
      }
      // A result whose output came by claim check: read it back. A blob that cannot be read for good (swept,
      // corrupt, no store here) fails the step with that named error instead of blocking the partition.
      let unreadable: (Error & { code?: string }) | undefined;
      try {
        decoded = await this.d.serde.resolve(decoded);
      } catch (err) {
        if (isRetryable(err)) throw err;
        unreadable = err as Error;
      }
      const runId = (decoded.value as { runId: string }).runId; // every input of the engine names its run
      const now = Date.now();
      const state = this.pending.get(runId);
      // The run's parked inputs go first, in order, before this one (which is read again after them).
      if (state?.parked?.length && this.parkedDefinition(state)) {
        work.splice(i, 0, ...this.unpark(runId, decoded.value.metadata.eventId, now));
        // Per input, each change is snapshotted: this one too (a later input may be ignored, or the last one).
        if (this.snapshots === 'per-input') await this.snapshotNow(runId);
        i--;
        continue;
      }
      const decodedInput = toWorkflowInput(
        unreadable && decoded.event === 'TaskCompleted'
          ? unreadableResultAsFailure(decoded, unreadable)
          : decoded,
        this.definition,
      );
      const eventId = decoded.value.metadata.eventId;
      if ('invalid' in decodedInput) {
        const at = { m, topic, logical, eventId, runId, state, now, decoded };
        if (this.invalid(decodedInput, at) && this.snapshots === 'per-input') await this.snapshotNow(runId);
        continue;
      }
      // The engine's own clock, never the producer's occurredAt: a step's deadline starts when it is dispatched,
      // so a producer's clock skew or the engine's own lag cannot make a fresh command's timeout already due.
      const input = { ...decodedInput, at: now };
      // The unpark timer did its work above, or cannot yet (no definition here): nothing else to do.
      if (input.kind === 'timer-fired' && input.timerId === UNPARK_TIMER) continue;
      const def = this.definitionOf(state, input);
      if (!def) {
        const at = { m, topic, logical, eventId, runId, state, now };
        if (this.withoutDefinition(input, at) && this.snapshots === 'per-input')
          await this.snapshotNow(runId);
        continue;
      }
      // A definition's mapping, condition or aggregate may throw (or an output may not encode): that input is
      // dead-lettered with the error, and the partition goes on (it must never block every run behind it).
      let d: Decision | undefined;
      let outputs: OutputRecord[] = [];
      const dispatchedAt =
        state && (input.kind === 'task-completed' || input.kind === 'task-failed')
          ? stepStateOf(state, input.stepId)?.dispatchedAt
          : undefined;
      try {
        d = this.pending.apply(def, input);
        if (!d.ignored) outputs = await this.encode(d, input, this.applySpan(m, decoded, input));
      } catch (e) {
        this.applyFailed(e, d, input, m, topic, state);
        continue;
      }
      if (d.ignoredReason) this.ignored(d, input);
      else this.applied(d.state!, input, decoded, dispatchedAt, outputs);
    }
  }

  /** The parked inputs of `runId`, taken out of its state, as the batch loop reads them; the run's cause is set. */
  private unpark(runId: string, eventId: string, now: number): Array<{ m: InputRecord; topic: string }> {
    const records = this.pending.unpark(runId).map((p) => this.parkedRecord(p, runId));
    this.causes.set(runId, { eventId, at: now });
    return records;
  }

  /** The definition an input applies to: its run's, or a StartRun's of a run not known; undefined when not here. */
  private definitionOf(state: RunState | undefined, input: WorkflowInput): WorkflowDefinition | undefined {
    if (state && !isParkedStart(state)) return this.d.registry.get(state.workflow, state.version);
    if (input.kind === 'start' && !state) return this.d.registry.get(input.workflow, input.version);
    return undefined;
  }

  /**
   * An input that is not valid: a StartRun of a workflow or version this instance does not have is kept as a parked
   * run; anything else is dead-lettered (InvalidRequestError). @returns whether the run's state changed
   */
  private invalid(
    decoded: {
      invalid: string;
      unknownDefinition?: { workflow: string; version: number | null; businessKey: string };
    },
    at: AtRecord,
  ): boolean {
    const unknown = decoded.unknownDefinition;
    if (unknown && (at.state === undefined || isParkedStart(at.state)))
      return this.park(at, 'start', definitionName(unknown), unknown);
    const err = new InvalidRequestError(decoded.invalid);
    this.dlq.push({ m: at.m, err, topic: at.topic });
    if (at.decoded?.event === 'StartRun' && at.decoded.value.parent)
      this.refuseChild(at.decoded.value, at.decoded.value.parent, at.state, err, at.now);
    return false;
  }

  /**
   * A child run's StartRun dead-lettered (refused for good): when no run of its id exists (none started, none
   * parked: a parked one waits for an instance that has its workflow), its parent's step gets a TaskFailed
   * (ChildStartRefusedError) in this transaction, as the child's end would have been, instead of waiting for its step
   * timeout. A duplicate of a StartRun whose run exists changes nothing here (the run reports its own end).
   */
  private refuseChild(
    start: { runId: string; workflow: string; metadata: { eventId: string } },
    parent: ParentRef,
    state: RunState | undefined,
    cause: Error,
    now: number,
  ): void {
    if (state !== undefined) return;
    const err = new ChildStartRefusedError(start.runId, start.workflow, cause);
    this.d.logger.warn(
      { runId: start.runId, parent, code: (cause as { code?: string }).code, reason: cause.message },
      "a child run's StartRun was refused: its parent's step fails",
    );
    this.records.push(
      refusedChildResult(this.d.codec, { runId: start.runId, workflow: start.workflow, parent }, err, {
        eventId: start.metadata.eventId,
        at: now,
      }),
    );
  }

  /**
   * An input whose definition this instance does not have: a cancel of a parked StartRun's run cancels it as it is
   * (the run never starts; parked.ts); an input of a known run is parked; one of an unknown run is ignored.
   * @returns whether the run's state changed
   */
  private withoutDefinition(input: WorkflowInput & { at: number }, at: AtRecord): boolean {
    if (isParkedStart(at.state) && input.kind === 'cancel') {
      this.pending.cancelParked(at.runId, input.reason, at.now);
      this.causes.set(at.runId, { eventId: input.eventId, at: at.now });
      this.d.logger.info(
        { runId: at.runId, reason: input.reason },
        'a parked StartRun cancelled: the run never starts',
      );
      return true;
    }
    // A wait report is not kept for later: it only moves a deadline now, and a waiting task sends one again.
    if (at.state && input.kind === 'task-waiting') {
      this.d.metrics.ignored.inc({ reason: 'NOT_APPLICABLE' } satisfies { reason: IgnoreReason });
      return false;
    }
    if (at.state) return this.park(at, input.kind, parkedDetail(input));
    this.d.metrics.ignored.inc({ reason: 'UNKNOWN_RUN' } satisfies { reason: IgnoreReason });
    return false;
  }

  /**
   * Keeps this input on its run, in order, for an instance that has the run's definition (parked.ts); dead-lettered
   * (ParkedInputsFullError) when the run holds ORCHESTRATOR_PARKED_INPUTS_LIMIT already.
   * @returns whether the run's state changed
   */
  private park(
    at: AtRecord,
    kind: ParkedInput['kind'],
    detail: string,
    start?: { workflow: string; version: number | null; businessKey: string },
  ): boolean {
    const { m, runId, now } = at;
    const held = at.state?.parked?.length ?? 0;
    const wanted = start ?? at.state!;
    if (held >= this.d.cfg.ORCHESTRATOR_PARKED_INPUTS_LIMIT) {
      this.dlq.push({
        m,
        err: new ParkedInputsFullError(runId, held, definitionName(wanted)),
        topic: at.topic,
      });
      return false;
    }
    const record = {
      topic: at.logical,
      partition: this.partition,
      offset: m.offset,
      value: m.value!.toString('base64'),
      headers: textHeaders(m.headers),
    };
    this.pending.park(runId, { kind, eventId: at.eventId, parkedAt: now, detail, record }, now, start);
    this.causes.set(runId, { eventId: at.eventId, at: now });
    this.d.logger.warn(
      { runId, kind, workflow: definitionName(wanted), offset: m.offset, topic: at.logical },
      'input parked: its workflow version is not registered on this instance',
    );
    return true;
  }

  /**
   * The span of an applied input (`keyflow.engine.apply <event>`, in its run's trace, linked from the batch span):
   * @returns its trace context, which the input's outputs carry and the run's timers continue
   */
  private applySpan(m: InputRecord, decoded: DecodedEvent, input: WorkflowInput): TraceContext {
    const parent = contextFromRecord(m.headers, decoded.value.metadata);
    const span = tracer().startSpan(
      `keyflow.engine.apply ${decoded.event}`,
      {
        attributes: { 'keyflow.run_id': input.runId, 'keyflow.input': input.kind },
        links: [{ context: this.spans.batch.spanContext() }],
      },
      parent,
    );
    this.spans.applied.push(span);
    const carried = trace.getSpanContext(parent);
    if (carried) this.spans.links.add(carried);
    const traceCtx = traceContextOf(trace.setSpan(parent, span));
    this.traces.set(input.runId, traceCtx);
    return traceCtx;
  }

  /** The records of a decision (and per input, the run's snapshot). @throws as encodeOutputs */
  private encode(d: Decision, input: WorkflowInput, traceCtx: TraceContext): Promise<OutputRecord[]> {
    this.encodedLocal = [];
    return encodeOutputs(
      this.d.codec,
      d.state!,
      d.commands,
      d.events,
      { eventId: input.eventId, at: input.at, ...traceCtx },
      this.d.claim,
      this.snapshots === 'per-input'
        ? { previous: this.o.runs.get(input.runId), partition: this.o.partition }
        : undefined,
      d.cancels,
      this.encodedLocal,
    );
  }

  /**
   * Applying an input failed: the run goes back to how it was before it. A blob store that does not answer aborts
   * the batch (rethrown: retried like a broker error); anything else about this input (a definition's bug, a payload
   * the claim check cannot carry) dead-letters only this input.
   */
  private applyFailed(
    e: unknown,
    d: Decision | undefined,
    input: WorkflowInput,
    m: InputRecord,
    topic: string,
    state: RunState | undefined,
  ): void {
    // Applied, but its outputs could not be encoded: the run goes back to how it was before this input.
    if (d && !d.ignored) this.pending.undoLast(input.runId);
    if (e instanceof BlobError && e.retryable) throw e;
    if (!(e instanceof BlobError) && isRetryable(e, false)) throw e;
    const err = e instanceof Error ? e : new Error(String(e));
    this.d.logger.error(
      { err, runId: input.runId, kind: input.kind },
      'applying an input failed; it goes to the DLQ',
    );
    const what = `${input.kind} for run ${input.runId}`;
    const dead = err instanceof PayloadTooLargeError ? err : new DefinitionError(what, err);
    this.dlq.push({ m, err: dead, topic });
    if (input.kind === 'start' && input.parent)
      this.refuseChild(
        { runId: input.runId, workflow: input.workflow, metadata: { eventId: input.eventId } },
        input.parent,
        state,
        dead,
        input.at,
      );
  }

  /** An input the reducer ignored: counted by reason (a signal refused for a full buffer is logged). */
  private ignored(d: Decision, input: WorkflowInput): void {
    this.d.metrics.ignored.inc({ reason: d.ignoredReason! });
    if (d.ignoredReason === SIGNAL_BUFFER_FULL)
      this.d.logger.warn(
        { runId: input.runId, reason: d.ignored },
        'signal rejected: the run buffers too many',
      );
  }

  /** An input applied: its outputs kept, its run's cause set, and what the metrics observe after the commit. */
  private applied(
    next: RunState,
    input: WorkflowInput & { at: number },
    decoded: DecodedEvent,
    dispatchedAt: number | undefined,
    outputs: OutputRecord[],
  ): void {
    this.causes.set(next.runId, { eventId: input.eventId, at: input.at });
    if (dispatchedAt !== undefined)
      this.latencies.push({
        taskType: (decoded.value as { taskType: string }).taskType,
        ms: input.at - dispatchedAt,
        outcome: input.kind === 'task-completed' ? 'completed' : 'failed',
        retry: (decoded.value as { attempt: number }).attempt > 1,
      });
    this.transitions++;
    if (input.kind === 'start') this.started.push(next.runId);
    if (TERMINAL.has(next.status))
      this.finished.push({
        workflow: next.workflow,
        status: next.status,
        ms: next.updatedAt - next.startedAt,
      });
    this.records.push(...outputs);
    if (this.encodedLocal.length) this.local.push(...this.encodedLocal);
    this.encodedLocal = [];
  }

  /** Per input only: the snapshot of a run parked or unparked (applied inputs carry theirs: encodeOutputs). */
  private async snapshotNow(runId: string): Promise<void> {
    const state = this.pending.get(runId);
    if (state) this.records.push(...(await this.snapshotRecords(runId, state)));
  }

  private snapshotRecords(runId: string, state: RunState): Promise<OutputRecord[]> {
    const o = this.o;
    return encodeSnapshotRecords(
      this.d.codec,
      state,
      o.runs.get(runId),
      this.causes.get(runId)!,
      this.d.claim,
      o.partition,
    );
  }

  /**
   * After the loop: the changed and removed runs; per batch, each changed run's snapshot.
   * @throws SnapshotPerInput (per-batch only) when a run's snapshot cannot be encoded, for good; a store outage as is
   */
  async snapshotChanged(): Promise<void> {
    this.changed = this.pending.changed();
    this.removed = this.pending.removed();
    if (this.snapshots === 'per-batch')
      for (const [runId, state] of this.changed) {
        try {
          this.records.push(...(await this.snapshotRecords(runId, state)));
        } catch (e) {
          if (isRetryable(e, false)) throw e; // a store outage: the batch is retried
          throw new SnapshotPerInput(runId, e);
        }
      }
  }

  /** After the commit: the partition's committed state moves on (runs, timers, the traces timers continue). */
  settle(): void {
    const o = this.o;
    o.failures = null;
    for (const id of this.removed) dropRun(o, id);
    for (const [id, s] of this.changed) {
      o.timers.track(s, o.runs.get(id));
      holdRun(o, s);
      const t = this.traces.get(id);
      if (TERMINAL.has(s.status)) o.traces.delete(id);
      else if (t) o.traces.set(id, t);
    }
  }

  /**
   * The runs' states this batch's transaction wrote to wf.state, each as the core snapshot record of its sequence
   * (per batch: after the batch's last input of the run; per input: after each, the last being this state), with
   * the event id of the input that record names as its cause.
   */
  *committedStates(): Iterable<OwnState> {
    for (const [runId, state] of this.changed) {
      const cause = this.causes.get(runId);
      if (cause) yield { state, cause: cause.eventId };
    }
  }

  /** After the commit: the batch's figures (`inputs`: the batch's records applied in the transaction). */
  observe(metrics: OrchestratorMetrics, inputs: number): void {
    metrics.transitions.inc(this.transitions);
    metrics.transactionInputs.observe(inputs);
    metrics.started.inc(this.started.length);
    for (const f of this.finished) {
      metrics.finished.inc({ status: f.status });
      metrics.runSeconds.observe({ workflow: f.workflow, status: f.status }, f.ms / 1000);
    }
    if (this.dlq.length) metrics.dlq.inc(this.dlq.length);
    for (const l of this.latencies) {
      metrics.stepLatency.observe({ task_type: l.taskType }, l.ms / 1000);
      metrics.taskResults.inc({ task_type: l.taskType, outcome: l.outcome, retry: String(l.retry) });
    }
  }

  /**
   * The definition a run's parked inputs wait for, if this instance has it: the run's workflow version, or for a
   * parked StartRun's run the version its StartRun asks for (0: the latest).
   */
  private parkedDefinition(s: RunState): WorkflowDefinition | undefined {
    return this.d.registry.get(s.workflow, isParkedStart(s) ? s.version || null : s.version);
  }

  /** A parked input's record as the batch loop reads it (on its own topic: wf.requests or task.results). */
  private parkedRecord(p: ParkedInput, runId: string): { m: InputRecord; topic: string } {
    return {
      topic: this.d.codec.physical(p.record.topic),
      m: {
        key: Buffer.from(runId),
        value: Buffer.from(p.record.value, 'base64'),
        offset: p.record.offset,
        headers: p.record.headers,
      },
    };
  }
}

/** A run's snapshot could not be encoded in a per-batch pass: the batch is applied again with one per input. */
export class SnapshotPerInput extends KeyflowError {
  readonly code = 'SNAPSHOT_PER_INPUT';
  /** The engine applies the batch again, one input at a time. */
  readonly retryable = true;
  constructor(
    readonly runId: string,
    cause: unknown,
  ) {
    super(`the snapshot of run ${runId} could not be encoded`, { cause });
  }
}

/**
 * A wf.requests record the engine cannot apply (a StartRun of an unknown workflow, with an input that is not JSON
 * or does not match the workflow's input schema): dead-lettered with this class and the reason. Not retryable.
 */
export class InvalidRequestError extends KeyflowError {
  readonly code = 'INVALID_REQUEST';
  readonly retryable = false;
}

/**
 * A child run's StartRun the engine refused for good (dead-lettered with `cause`: INVALID_REQUEST for an input the
 * child's schema refuses, PAYLOAD_TOO_LARGE, DEFINITION_FAILED): the error of the parent step's TaskFailed. Not
 * retryable: the same StartRun is refused the same way (the step's retry policy does not retry it).
 */
export class ChildStartRefusedError extends KeyflowError {
  readonly code = 'CHILD_START_REFUSED';
  readonly retryable = false;
  constructor(runId: string, workflow: string, cause: Error) {
    const code = cause instanceof KeyflowError ? `${cause.code}: ` : '';
    super(`child run ${runId} of ${workflow} was refused: ${code}${cause.message}`, { cause });
  }
}

/**
 * An input for a run that holds ORCHESTRATOR_PARKED_INPUTS_LIMIT parked inputs already (its workflow version is not
 * registered on this instance): dead-lettered to its topic's DLQ with this class. Not retryable here: redrive it once
 * an instance with the workflow version owns the run.
 */
export class ParkedInputsFullError extends KeyflowError {
  readonly code = 'PARKED_INPUTS_FULL';
  readonly retryable = false;
  constructor(runId: string, held: number, definition: string) {
    super(
      `run ${runId} holds ${held} parked inputs (ORCHESTRATOR_PARKED_INPUTS_LIMIT) waiting for ${definition}, not registered here`,
    );
  }
}

/**
 * Applying an input failed for good because a definition's function threw (a mapping, condition, item list or
 * aggregate, or one that changed what it was given): the input is dead-lettered with this class and the cause's
 * message. Not retryable: fix the definition, then redrive.
 */
export class DefinitionError extends KeyflowError {
  readonly code = 'DEFINITION_FAILED';
  readonly retryable = false;
  constructor(what: string, cause: Error) {
    super(`${what}: ${cause.message}`, { cause });
  }
}

/** `<workflow>@<version>` of a run, `latest` for a parked StartRun's run without a version (0). */
export const definitionName = (s: { workflow: string; version: number | null }) =>
  `${s.workflow}@${s.version || 'latest'}`;

/** A record's headers as text (what a parked input keeps: the trace context). */
function textHeaders(headers: IHeaders | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers ?? {})) {
    const one = Array.isArray(v) ? v[0] : v;
    if (one !== undefined) out[k] = one.toString();
  }
  return out;
}

/** A word on a parked input for people (ParkedInput.detail). */
function parkedDetail(input: WorkflowInput): string {
  switch (input.kind) {
    case 'signal':
      return input.signal;
    case 'cancel':
      return input.terminate ? `terminate: ${input.reason}` : input.reason;
    case 'task-completed':
    case 'task-failed':
    case 'task-waiting':
      return `${input.stepId} attempt ${input.attempt}`;
    case 'timer-fired':
      return input.timerId;
    case 'retry':
      return input.fromStepId ?? 'from the failed step';
    case 'start':
      return definitionName(input);
  }
}
