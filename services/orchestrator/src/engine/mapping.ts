import { derivedEventId, newMetadata, type DecodedEvent, type EventCodec } from '@keyflow/contracts';
import type { EventName, TaskCommand } from '@keyflow/schemas';
import type { CommandSpec, LifecycleSpec, RunState, WorkflowInput } from '@keyflow/workflow';

/** An orchestrator input as decoded from wf.requests or task.results, as a reducer input. */
export function toWorkflowInput(
  d: DecodedEvent,
  resolveVersion: (workflow: string, version: number | null) => number | undefined,
): WorkflowInput | { invalid: string } {
  const m = d.value.metadata;
  const base = { eventId: m.eventId, at: m.occurredAt };
  switch (d.event) {
    case 'StartRun': {
      const v = resolveVersion(d.value.workflow, d.value.workflowVersion);
      if (v === undefined)
        return { invalid: `unknown workflow ${d.value.workflow} v${d.value.workflowVersion ?? 'latest'}` };
      let input: unknown;
      try {
        input = JSON.parse(d.value.input);
      } catch {
        return { invalid: 'StartRun.input is not JSON' };
      }
      return {
        ...base,
        runId: d.value.runId,
        kind: 'start',
        workflow: d.value.workflow,
        version: v,
        businessKey: d.value.businessKey,
        input: (input ?? {}) as Record<string, unknown>,
      };
    }
    case 'TaskCompleted': {
      let output: unknown;
      try {
        output = JSON.parse(d.value.output);
      } catch {
        output = d.value.output;
      }
      return {
        ...base,
        runId: d.value.runId,
        kind: 'task-completed',
        stepId: d.value.stepId,
        attempt: d.value.attempt,
        output,
        idempotencyKey: d.value.idempotencyKey,
      };
    }
    case 'TaskFailed':
      return {
        ...base,
        runId: d.value.runId,
        kind: 'task-failed',
        stepId: d.value.stepId,
        attempt: d.value.attempt,
        errorClass: d.value.error.errorClass,
        message: d.value.error.message,
        retryable: d.value.error.retryable,
        code: d.value.error.code,
      };
    case 'TimerFired':
      return { ...base, runId: d.value.runId, kind: 'timer-fired', timerId: d.value.timerId };
    case 'CancelRun':
      return { ...base, runId: d.value.runId, kind: 'cancel', reason: d.value.reason };
    case 'SignalRun': {
      let payload: unknown = d.value.payload;
      try {
        payload = JSON.parse(d.value.payload);
      } catch {
        /* keep the text */
      }
      return { ...base, runId: d.value.runId, kind: 'signal', signal: d.value.signal, payload };
    }
    case 'RetryRun':
      return { ...base, runId: d.value.runId, kind: 'retry', fromStepId: d.value.fromStepId };
    default:
      return { invalid: `event ${d.event} is not an orchestrator input` };
  }
}

/** Name of the snapshot's id derived from its input's id (outputs use their index 0, 1, ...). */
const SNAPSHOT_ID_NAME = 'snapshot';

export interface OutputRecord {
  topic: string;
  key: string;
  value: Buffer;
}

/** Encodes the reducer's commands, lifecycle events and the snapshot as Kafka records. */
export function encodeOutputs(
  codec: EventCodec,
  state: RunState,
  commands: CommandSpec[],
  events: LifecycleSpec[],
  cause: { eventId: string; at: number; traceparent: string | null; tracestate: string | null },
): OutputRecord[] {
  const out: OutputRecord[] = [];
  let i = 0;
  const meta = (event: EventName, key: string) =>
    newMetadata(event, {
      key,
      correlationId: state.runId,
      causationId: cause.eventId,
      // Deterministic: re-processing one input (after an aborted transaction) yields the same ids.
      eventId: derivedEventId(cause.eventId, i++),
      occurredAt: cause.at,
      traceparent: cause.traceparent,
      tracestate: cause.tracestate,
    });
  for (const c of commands) {
    const logical = `task.${c.taskType}`;
    const cmd: TaskCommand = {
      metadata: meta('TaskCommand', c.entityKey),
      runId: state.runId,
      workflow: state.workflow,
      workflowVersion: state.version,
      stepId: c.stepId,
      taskType: c.taskType,
      attempt: c.attempt,
      idempotencyKey: c.idempotencyKey,
      input: c.input,
      inputRef: null,
      timeoutMs: c.timeoutMs,
      maxAttempts: c.maxAttempts,
      compensates: c.compensates,
    };
    out.push({
      topic: codec.physical(logical),
      key: c.entityKey,
      value: codec.encode(logical, 'TaskCommand', cmd),
    });
  }
  for (const e of events) {
    const { type, ...fields } = e;
    const value = codec.encode('wf.events', type, {
      metadata: meta(type, state.runId),
      runId: state.runId,
      ...fields,
    } as never);
    out.push({ topic: codec.physical('wf.events'), key: state.runId, value });
  }
  out.push({
    topic: codec.physical('wf.state'),
    key: state.runId,
    value: encodeSnapshot(codec, state, cause),
  });
  return out;
}

export function encodeSnapshot(
  codec: EventCodec,
  state: RunState,
  cause: { eventId: string; at: number },
): Buffer {
  return codec.encode('wf.state', 'RunSnapshot', {
    metadata: newMetadata('RunSnapshot', {
      key: state.runId,
      correlationId: state.runId,
      causationId: cause.eventId,
      eventId: derivedEventId(cause.eventId, SNAPSHOT_ID_NAME),
      occurredAt: cause.at,
    }),
    runId: state.runId,
    sequence: state.sequence,
    status: state.status,
    state: JSON.stringify(state),
  });
}
