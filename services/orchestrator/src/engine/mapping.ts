import { traceHeaders } from '@keyflow/observability';
import {
  blobRetentionMs,
  legacyRunBlobPrefix,
  payloadBlobKey,
  runBlobPrefix,
  supersededExpiry,
  type ClaimCheck,
} from '@keyflow/blobs';
import {
  CLAIM_CHECKED_FIELDS,
  derivedEventId,
  newMetadata,
  type DecodedEvent,
  type EventCodec,
} from '@keyflow/contracts';
import type { EventName, TaskCommand } from '@keyflow/schemas';
import { taskTopic, Topic } from '@keyflow/schemas';
import {
  parentResultOf,
  runInputIssues,
  segmentKey,
  snapshotParts,
  type WorkflowDefinition,
  type ChildCancel,
  type CommandSpec,
  type LifecycleSpec,
  type ParentRef,
  type RunState,
  type WorkflowInput,
} from '@keyflow/workflow';

/**
 * An orchestrator input as decoded from wf.requests or task.results, as a reducer input; `invalid` (the reason) for
 * a StartRun of an unknown workflow, with an input that is not JSON or that does not match the workflow's input
 * schema (the engine dead-letters those; the API refuses them first with a 400). For a StartRun of a workflow or
 * version `resolve` does not know, `unknownDefinition` names what it asks for (the engine parks it: see
 * libs/workflow parked.ts; a rebuild skips it).
 */
export function toWorkflowInput(
  d: DecodedEvent,
  resolve: (workflow: string, version: number | null) => WorkflowDefinition | undefined,
  /**
   * Check a StartRun's input against the workflow's input schema (default true). A rebuild passes false for the
   * StartRuns the engine applied (they caused events): the engine decided then, with the definitions of the time.
   */
  checkInput = true,
): WorkflowInput | InvalidInput {
  const m = d.value.metadata;
  // Each input is written out whole: on Node 20 every property added after an object spread (`{ eventId, at, more }`)
  // is a slow map transition, about 1 µs each (7 µs for a TaskCompleted, 0.1 µs written out).
  const [eventId, at] = [m.eventId, m.occurredAt];
  switch (d.event) {
    case 'StartRun':
      return startRunInput(d.value, eventId, at, resolve, checkInput);
    case 'TaskCompleted':
      return taskCompletedInput(d.value, eventId, at);
    case 'TaskFailed':
      return {
        eventId,
        at,
        runId: d.value.runId,
        kind: 'task-failed',
        stepId: d.value.stepId,
        attempt: d.value.attempt,
        errorClass: d.value.error.errorClass,
        message: d.value.error.message,
        retryable: d.value.error.retryable,
        code: d.value.error.code,
      };
    case 'TaskWaiting':
      return {
        eventId,
        at,
        runId: d.value.runId,
        kind: 'task-waiting',
        stepId: d.value.stepId,
        attempt: d.value.attempt,
        idempotencyKey: d.value.idempotencyKey,
        admitted: d.value.admitted,
      };
    case 'TimerFired':
      return {
        eventId,
        at,
        runId: d.value.runId,
        kind: 'timer-fired',
        timerId: d.value.timerId,
        dueAt: d.value.dueAt,
      };
    case 'CancelRun':
      return {
        eventId,
        at,
        runId: d.value.runId,
        kind: 'cancel',
        reason: d.value.reason,
        terminate: d.value.terminate === true, // v1 records have no field: a cancel
        compensateCompleted: d.value.compensateCompleted === true, // a parent's request to its child (v3)
        reportTo: d.value.reportTo ?? null,
      };
    case 'SignalRun': {
      let payload: unknown = d.value.payload;
      try {
        payload = JSON.parse(d.value.payload);
      } catch {
        /* keep the text */
      }
      return { eventId, at, runId: d.value.runId, kind: 'signal', signal: d.value.signal, payload };
    }
    case 'RetryRun':
      return { eventId, at, runId: d.value.runId, kind: 'retry', fromStepId: d.value.fromStepId };
    default:
      return { invalid: `event ${d.event} is not an orchestrator input` };
  }
}

/** What {@link toWorkflowInput} answers for a record that is no reducer input (see there). */
export type InvalidInput = {
  invalid: string;
  unknownDefinition?: { workflow: string; version: number | null; businessKey: string };
};

/** A StartRun as a `start` input: its definition resolved, its input parsed and (with `checkInput`) checked. */
function startRunInput(
  r: Extract<DecodedEvent, { event: 'StartRun' }>['value'],
  eventId: string,
  at: number,
  resolve: (workflow: string, version: number | null) => WorkflowDefinition | undefined,
  checkInput: boolean,
): WorkflowInput | InvalidInput {
  const def = resolve(r.workflow, r.workflowVersion);
  if (def === undefined)
    return {
      invalid: `unknown workflow ${r.workflow} v${r.workflowVersion ?? 'latest'}`,
      unknownDefinition: {
        workflow: r.workflow,
        version: r.workflowVersion ?? null,
        businessKey: r.businessKey,
      },
    };
  const v = def.version;
  let input: unknown;
  try {
    input = JSON.parse(r.input);
  } catch {
    return { invalid: 'StartRun.input is not JSON' };
  }
  const issues = checkInput ? runInputIssues(def, input ?? {}) : [];
  if (issues.length)
    return {
      invalid: `StartRun.input does not match workflow ${def.name} v${v}'s input schema: ${issues
        .map((i) => `${i.path}: ${i.message}`)
        .join('; ')}`,
    };
  return {
    eventId,
    at,
    runId: r.runId,
    kind: 'start',
    workflow: r.workflow,
    version: v,
    businessKey: r.businessKey,
    input: (input ?? {}) as Record<string, unknown>,
    ...(r.parent ? { parent: r.parent } : {}),
  };
}

/** A TaskCompleted as a `task-completed` input; an output that is not JSON is kept as its text. */
function taskCompletedInput(
  r: Extract<DecodedEvent, { event: 'TaskCompleted' }>['value'],
  eventId: string,
  at: number,
): WorkflowInput {
  let output: unknown;
  try {
    output = JSON.parse(r.output);
  } catch {
    output = r.output;
  }
  return {
    eventId,
    at,
    runId: r.runId,
    kind: 'task-completed',
    stepId: r.stepId,
    attempt: r.attempt,
    output,
    idempotencyKey: r.idempotencyKey,
  };
}

/** Name of the snapshot's id derived from its input's id (outputs use their index 0, 1, ...). */
const SNAPSHOT_ID_NAME = 'snapshot';

export interface OutputRecord {
  topic: string;
  key: string;
  value: Buffer;
  /** Set for wf.state records, whose segment keys do not hash to the run's partition. */
  partition?: number;
  /** W3C trace context headers (commands and lifecycle events: the span that applied their input). */
  headers?: Record<string, string>;
}

/**
 * Encodes the reducer's commands, lifecycle events and (given `snapshot`) the snapshot as Kafka records. Every
 * payload over the claim check's threshold (a command's input, an event's output or input, the snapshot's state) is stored as a blob first
 * and the record carries its reference (docs/contracts.md "Claim check").
 * @throws PayloadTooLargeError (PAYLOAD_TOO_LARGE, not retryable) when one cannot be carried; store outages as is.
 */
export async function encodeOutputs(
  codec: EventCodec,
  state: RunState,
  commands: CommandSpec[],
  events: LifecycleSpec[],
  cause: { eventId: string; at: number; traceparent: string | null; tracestate: string | null },
  claim: ClaimCheck,
  /**
   * Adds the run's snapshot records (see encodeSnapshotRecords) when given; the engine encodes them once per batch
   * instead (Engine.applyBatch), except when it looks for the one input whose state cannot be encoded.
   */
  snapshot?: { previous: RunState | undefined; partition: number },
  /** Child runs to cancel (Decision.cancels): a CancelRun each on wf.requests, keyed by the child's run id. */
  cancels: ChildCancel[] = [],
  /**
   * Where a local step's command goes (CommandSpec.local): its TaskCommand (input inline: it never travels on
   * Kafka) with the trace headers, for the local-step runner after the commit; no record is produced for it.
   */
  local: LocalCommand[] = [],
): Promise<OutputRecord[]> {
  const out: OutputRecord[] = [];
  let i = 0;
  const headers = traceHeaders(cause);
  const meta = (event: EventName, key: string, correlationId = state.runId) =>
    newMetadata(event, {
      key,
      correlationId,
      causationId: cause.eventId,
      // Deterministic: re-processing one input (after an aborted transaction) yields the same ids.
      eventId: derivedEventId(cause.eventId, i++),
      occurredAt: cause.at,
      traceparent: cause.traceparent,
      tracestate: cause.tracestate,
    });
  for (const c of commands) {
    if (c.child) {
      out.push(childStart(codec, state, c, meta('StartRun', c.child.runId, c.child.runId), headers));
      continue;
    }
    if (c.compensateChild) {
      const runId = c.compensateChild.runId;
      const reportTo = {
        runId: state.runId,
        stepId: c.stepId,
        attempt: c.attempt,
        idempotencyKey: c.idempotencyKey,
      };
      const x = { runId, reason: `parent run ${state.runId} compensates ${c.stepId}`, terminate: false };
      out.push(
        childCancel(
          codec,
          { ...x, compensateCompleted: true, reportTo },
          meta('CancelRun', runId, runId),
          headers,
        ),
      );
      continue;
    }
    if (c.local) {
      const command = taskCommand(state, c, { inline: c.input, ref: null }, meta('TaskCommand', c.entityKey));
      local.push({ command, headers });
      continue;
    }
    const logical = taskTopic(c.taskType);
    const input = await claim.offload(
      `input of ${c.idempotencyKey} attempt ${c.attempt}`,
      () => payloadBlobKey('inputs', state.runId, `${c.idempotencyKey}@${c.attempt}`),
      c.input,
      blobRetentionMs(),
    );
    const cmd = taskCommand(state, c, input, meta('TaskCommand', c.entityKey));
    out.push({
      topic: codec.physical(logical),
      key: c.entityKey,
      value: codec.encode(logical, 'TaskCommand', cmd),
      headers,
    });
  }
  for (const x of cancels) out.push(childCancel(codec, x, meta('CancelRun', x.runId, x.runId), headers));
  out.push(...(await eventRecords(codec, state, events, claim, meta, headers)));
  const ended = events.some((e) => RUN_ENDS.has(e.type));
  const result = ended ? await parentResult(codec, state, claim, meta) : undefined;
  if (result) out.push({ ...result, headers });
  if (snapshot)
    out.push(
      ...(await encodeSnapshotRecords(codec, state, snapshot.previous, cause, claim, snapshot.partition)),
    );
  return out;
}

/** A local step's command as the engine hands it to the local-step runner (see encodeOutputs). */
export interface LocalCommand {
  command: TaskCommand;
  /** The trace headers its record would have carried (the dispatching input's context). */
  headers: Record<string, string> | undefined;
}

/** The lifecycle events that end a run: with them, a child run reports to its parent. */
const RUN_ENDS: ReadonlySet<string> = new Set([
  'RunCompleted',
  'RunFailed',
  'RunCompensated',
  'RunCancelled',
]);

type Meta = (event: EventName, key: string, correlationId?: string) => TaskCommand['metadata'];

/** The lifecycle events as wf.events records, their user-sized fields claim-checked. */
async function eventRecords(
  codec: EventCodec,
  state: RunState,
  events: LifecycleSpec[],
  claim: ClaimCheck,
  meta: Meta,
  headers: Record<string, string> | undefined,
): Promise<OutputRecord[]> {
  const out: OutputRecord[] = [];
  for (const e of events) {
    const { type, ...fields } = e;
    const metadata = meta(type, state.runId);
    // The lifecycle events that may carry user-sized data (StepCompleted, RunCompleted, RunStarted) and their fields:
    // the one list the payload serde reads them back by.
    const payload = CLAIM_CHECKED_FIELDS[type as EventName];
    const extra: Record<string, string | null> = {};
    if (payload) {
      const text = (fields as Record<string, string>)[payload.text];
      const checked = await claim.offload(
        `${payload.text} of ${type} of run ${state.runId}`,
        () => payloadBlobKey('events', state.runId, metadata.eventId),
        text,
        blobRetentionMs(),
      );
      extra[payload.text] = checked.inline;
      extra[payload.ref] = checked.ref;
    }
    const value = codec.encode(Topic.WF_EVENTS, type, {
      metadata,
      runId: state.runId,
      ...fields,
      ...extra,
    } as never);
    out.push({ topic: codec.physical(Topic.WF_EVENTS), key: state.runId, value, headers });
  }
  return out;
}

/** A CancelRun of a child run (wf.requests, keyed by its run id), written in its parent's transaction. */
function childCancel(
  codec: EventCodec,
  x: ChildCancel,
  metadata: TaskCommand['metadata'],
  headers: Record<string, string> | undefined,
): OutputRecord {
  const value = codec.encode(Topic.WF_REQUESTS, 'CancelRun', {
    metadata,
    runId: x.runId,
    reason: x.reason,
    terminate: x.terminate,
    compensateCompleted: x.compensateCompleted,
    reportTo: x.reportTo ?? null,
  });
  return { topic: codec.physical(Topic.WF_REQUESTS), key: x.runId, value, headers };
}

/**
 * A child step's attempt as the StartRun of its child run (wf.requests, keyed by the child's run id): written in the
 * parent's transaction, so it is written exactly when the parent's state that awaits it is; a replay writes the same
 * run id, which the child's engine keeps once (duplicate start).
 */
function childStart(
  codec: EventCodec,
  state: RunState,
  c: CommandSpec,
  metadata: TaskCommand['metadata'],
  headers: Record<string, string> | undefined,
): OutputRecord {
  const child = c.child!;
  const value = codec.encode(Topic.WF_REQUESTS, 'StartRun', {
    metadata,
    runId: child.runId,
    workflow: child.workflow,
    workflowVersion: child.version,
    businessKey: c.entityKey,
    input: c.input,
    idempotencyKey: null,
    trigger: 'parent',
    parent: { runId: state.runId, stepId: c.stepId, attempt: c.attempt, idempotencyKey: c.idempotencyKey },
  });
  return { topic: codec.physical(Topic.WF_REQUESTS), key: child.runId, value, headers };
}

/**
 * A child run's end as its parent step's result (task.results, keyed by the parent's run id): a TaskCompleted with
 * its output, or a TaskFailed with its error. Written in the child's transaction that ends it (once); the parent
 * applies it by the usual result rules (a stale attempt is ignored). Undefined for a run without a parent.
 */
async function parentResult(
  codec: EventCodec,
  state: RunState,
  claim: ClaimCheck,
  meta: Meta,
): Promise<Omit<OutputRecord, 'headers'> | undefined> {
  const r = parentResultOf(state);
  if (!r) return undefined;
  const p = r.to;
  const topic = codec.physical(Topic.TASK_RESULTS);
  const common = childResultFields(p, state.runId, state.workflow);
  if (r.completed) {
    const output = await claim.offload(
      `output of child run ${state.runId}`,
      () => payloadBlobKey('outputs', p.runId, `${p.idempotencyKey}@${p.attempt}`),
      JSON.stringify(r.output ?? null),
      blobRetentionMs(),
    );
    const value = codec.encode(Topic.TASK_RESULTS, 'TaskCompleted', {
      metadata: meta('TaskCompleted', p.runId, p.runId),
      ...common,
      output: output.inline,
      outputRef: output.ref,
      durationMs: (state.endedAt ?? state.updatedAt) - state.startedAt,
      replayed: false,
    });
    return { topic, key: p.runId, value };
  }
  const at = state.endedAt ?? state.updatedAt;
  const value = codec.encode(Topic.TASK_RESULTS, 'TaskFailed', {
    metadata: meta('TaskFailed', p.runId, p.runId),
    ...common,
    error: { ...r.error, code: r.error.code ?? null, attempts: 1, firstFailureAt: at, lastFailureAt: at },
  });
  return { topic, key: p.runId, value };
}

/**
 * The parent step's TaskFailed for a child run whose StartRun the engine refused for good (dead-lettered: an input
 * its schema refuses, a payload too large, a definition that threw): task.results, keyed by the parent's run id,
 * for the step's attempt, as the child's end would have been (task type `child:<workflow>`, worker id
 * `child/<run>`), written in the transaction that dead-letters the StartRun, so the parent's step fails (or retries
 * by its policy) at once instead of at its step timeout. `err` is the refusal: its class and code are carried, its
 * retry flag says whether the step may retry. Event id derived from the StartRun's (a replay writes the same).
 */
export function refusedChildResult(
  codec: EventCodec,
  start: { runId: string; workflow: string; parent: ParentRef },
  err: { name: string; message: string; code: string; retryable: boolean },
  cause: { eventId: string; at: number },
): Omit<OutputRecord, 'headers'> {
  const p = start.parent;
  const value = codec.encode(Topic.TASK_RESULTS, 'TaskFailed', {
    metadata: newMetadata('TaskFailed', {
      key: p.runId,
      correlationId: p.runId,
      causationId: cause.eventId,
      eventId: derivedEventId(cause.eventId, 'refused-child'),
      occurredAt: cause.at,
    }),
    ...childResultFields(p, start.runId, start.workflow),
    error: {
      errorClass: err.name,
      message: err.message,
      retryable: err.retryable,
      code: err.code,
      attempts: 1,
      firstFailureAt: cause.at,
      lastFailureAt: cause.at,
    },
  });
  return { topic: codec.physical(Topic.TASK_RESULTS), key: p.runId, value };
}

/**
 * The fields a child run's end (or refusal) carries as its parent step's result on task.results: the parent's run,
 * step, attempt and idempotency key, task type `child:<workflow>`, worker id `child/<child run>`.
 */
function childResultFields(parent: ParentRef, childRunId: string, workflow: string) {
  return {
    runId: parent.runId,
    stepId: parent.stepId,
    taskType: `child:${workflow}`,
    attempt: parent.attempt,
    idempotencyKey: parent.idempotencyKey,
    workerId: `child/${childRunId}`,
  };
}

/** A reducer's command as a TaskCommand, its input inline or by claim check (`input`, offloaded already). */
function taskCommand(
  state: RunState,
  c: CommandSpec,
  input: { inline: string; ref: string | null },
  metadata: TaskCommand['metadata'],
): TaskCommand {
  return {
    metadata,
    runId: state.runId,
    workflow: state.workflow,
    workflowVersion: state.version,
    stepId: c.stepId,
    taskType: c.taskType,
    attempt: c.attempt,
    idempotencyKey: c.idempotencyKey,
    input: input.inline,
    inputRef: input.ref,
    timeoutMs: c.timeoutMs,
    maxAttempts: c.maxAttempts,
    compensates: c.compensates,
  };
}

/** Prefix of the blob keys of one run's snapshots (`state/<run>/`, the run id as `blobKeySegment` encodes it). */
export const snapshotBlobPrefix = (runId: string) => runBlobPrefix('state', runId);
/** Prefix of the blob keys of one segment of a run's map items (`segments/<run>/<map>.<k>/`), or of all of them. */
export const segmentBlobPrefix = (runId: string, segment?: { mapId: string; index: number }) =>
  runBlobPrefix('segments', runId) + (segment ? `${segment.mapId}.${segment.index}/` : ''); // step ids are [A-Za-z0-9_.-]: safe in a blob key

/**
 * The prefixes of the blobs a forgotten run may still hold without an expiry (its latest snapshot's and segments'):
 * `state/<run>/` and `segments/<run>/`, and, when `legacyShared` is false, the prefixes the same blobs had before run
 * ids were encoded injectively (`legacyRunBlobPrefix`), so blobs written by an earlier version expire too. Pass
 * `legacyShared` true when another run still known shares the legacy prefix (`x:1` and `x_1`): its blobs there must
 * stay, and these are left to expire with the last of those runs.
 */
export function forgottenRunBlobPrefixes(runId: string, legacyShared: boolean): string[] {
  const prefixes = [snapshotBlobPrefix(runId), segmentBlobPrefix(runId)];
  if (!legacyShared)
    for (const kind of ['state', 'segments']) {
      const legacy = legacyRunBlobPrefix(kind, runId);
      if (legacy) prefixes.push(legacy);
    }
  return prefixes;
}

/**
 * The wf.state records of `state`: one per segment of map items changed since `previous` (the state of the run's
 * last committed snapshot; undefined: all of them), then the core record (docs/workflows.md "Run state"). All go to
 * `partition`, the run's. A part over the claim check's threshold is stored as a blob (kept while its record is the
 * latest for its key: wf.state is compacted) and the record carries `stateRef`; the part's earlier blobs then
 * expire once their records can be compacted away.
 * @throws PayloadTooLargeError (not retryable) when a part exceeds even the blob store's limit; outages as is.
 */
export async function encodeSnapshotRecords(
  codec: EventCodec,
  state: RunState,
  previous: RunState | undefined,
  cause: { eventId: string; at: number },
  claim: ClaimCheck,
  partition: number,
): Promise<OutputRecord[]> {
  const parts = snapshotParts(state, previous);
  const topic = codec.physical(Topic.WF_STATE);
  const out: OutputRecord[] = [];
  for (const seg of parts.segments) {
    const key = segmentKey(state.runId, seg.mapId, seg.index);
    out.push({
      topic,
      key,
      partition,
      value: await encodeStatePart(codec, claim, {
        what: `segment ${seg.index} of map ${seg.mapId} of run ${state.runId}`,
        state,
        text: seg.text,
        blob: () => {
          const prefix = segmentBlobPrefix(state.runId, seg);
          return { prefix, key: `${prefix}${state.sequence}` };
        },
        cause,
        eventId: derivedEventId(cause.eventId, `${SNAPSHOT_ID_NAME}/${seg.mapId}/${seg.index}`),
        segment: { mapId: seg.mapId, index: seg.index },
      }),
    });
  }
  out.push({
    topic,
    key: state.runId,
    partition,
    value: await encodeStatePart(codec, claim, {
      what: `state of run ${state.runId}`,
      state,
      text: parts.core,
      blob: () => ({
        prefix: snapshotBlobPrefix(state.runId),
        key: payloadBlobKey('state', state.runId, String(state.sequence)),
      }),
      cause,
      eventId: derivedEventId(cause.eventId, SNAPSHOT_ID_NAME),
      segment: null,
    }),
  });
  return out;
}

async function encodeStatePart(
  codec: EventCodec,
  claim: ClaimCheck,
  p: {
    what: string;
    state: RunState;
    text: string;
    /** The blob key a part over the threshold is stored under, and its earlier blobs' prefix: hashed only then. */
    blob: () => { prefix: string; key: string };
    cause: { eventId: string; at: number };
    eventId: string;
    segment: { mapId: string; index: number } | null;
  },
): Promise<Buffer> {
  let blob: { prefix: string; key: string } | undefined;
  const checked = await claim.offload(p.what, () => (blob ??= p.blob()).key, p.text, null);
  if (checked.ref && claim.store) {
    blob ??= p.blob();
    await claim.store.expire(blob.prefix, supersededExpiry(Date.now(), claim.o.graceMs), blob.key);
  }
  return codec.encode(Topic.WF_STATE, 'RunSnapshot', {
    metadata: newMetadata('RunSnapshot', {
      key: p.state.runId,
      correlationId: p.state.runId,
      causationId: p.cause.eventId,
      eventId: p.eventId,
      occurredAt: p.cause.at,
    }),
    runId: p.state.runId,
    sequence: p.state.sequence,
    status: p.state.status,
    state: checked.inline,
    stateRef: checked.ref,
    segment: p.segment,
  });
}
