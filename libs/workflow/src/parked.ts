import { TIMELINE_MAX, type RunState, type WorkflowInput } from './reducer';

/**
 * Inputs an engine keeps on a run, in order, when it cannot apply them: the run's workflow (or version) is not
 * registered on that instance (the old side of a rolling deploy, or a StartRun of a version only the new side has).
 * They are part of the run's committed state (its wf.state snapshot, written in the same transaction as the input's
 * offset), so nothing is lost; the next owner that has the definition applies them, in order, before any newer input
 * of the run (when one arrives, or when the run's `unpark` timer fires after a take-over).
 */
export interface ParkedInput {
  /** The input's kind (`start`, `signal`, `cancel`, `task-completed`, ...): what the run API shows. */
  kind: WorkflowInput['kind'];
  /** The input's event id (its record's `metadata.eventId`). */
  eventId: string;
  /** When the engine parked it, ms since epoch (its clock). */
  parkedAt: number;
  /** A word on it for people: the signal's name, the step of a result, the timer's id, the cancel's reason. */
  detail?: string;
  /**
   * The record as the engine read it, applied again as read (or dead-lettered as read, to its topic's DLQ, when it
   * fails then): its logical topic, partition and offset, its value in base64 and its headers as text.
   */
  record: {
    topic: 'wf.requests' | 'task.results';
    partition: number;
    offset: string;
    value: string;
    headers: Record<string, string>;
  };
}

/** The status of a run whose StartRun is parked (nothing of it ran yet); not terminal. */
export const PARKED = 'parked';
/**
 * The durable timer a run with parked inputs holds (due at once): whichever engine owns the run fires it, and one
 * that has the run's definition then applies the parked inputs without waiting for the run's next input.
 */
export const UNPARK_TIMER = 'unpark';
/** Inputs a run may hold parked unless the engine is told otherwise (ORCHESTRATOR_PARKED_INPUTS_LIMIT). */
export const DEFAULT_PARKED_INPUTS_LIMIT = 1_000;

/**
 * The state a StartRun of an unknown workflow or version leaves: a run in status `parked` holding the StartRun as its
 * first parked input. `version` is the requested one, 0 for "the latest" (a StartRun without a version). Its
 * sequence stays 0 while it is parked, so the run's first real snapshot (sequence 1) supersedes it.
 */
export function parkedRunState(start: {
  runId: string;
  workflow: string;
  version: number | null;
  businessKey: string;
  at: number;
}): RunState {
  return {
    runId: start.runId,
    workflow: start.workflow,
    version: start.version ?? 0,
    businessKey: start.businessKey,
    input: {},
    status: PARKED,
    plan: [],
    position: 0,
    steps: {},
    timers: {},
    compensable: [],
    signals: {},
    startedAt: start.at,
    updatedAt: start.at,
    sequence: 0,
    timeline: [],
    parked: [],
  };
}

/** Whether `s` is a parked StartRun's run (see {@link parkedRunState}). */
export const isParkedStart = (s: RunState | undefined): boolean => s?.status === PARKED;

/**
 * Appends `p` to the run's parked inputs, in place, at `at` (ms): the run's `unpark` timer is set (due at `at`) and
 * its sequence moves on (a parked start's stays 0), so the snapshot supersedes the previous one.
 * @returns the state (`s` itself)
 */
export function parkInPlace(s: RunState, p: ParkedInput, at: number): RunState {
  (s.parked ??= []).push(p);
  s.timers[UNPARK_TIMER] ??= { dueAt: at, purpose: 'unpark' };
  if (!isParkedStart(s)) s.sequence++;
  s.updatedAt = at;
  log(s, at, 'InputParked', p.detail ? `${p.kind} ${p.detail}` : p.kind);
  return s;
}

/**
 * Ends a parked StartRun's run without starting it, in place: a cancel (or terminate) of it, applied by an engine
 * that does not have its workflow either (a StartRun of a workflow no deployment has: the operator's way out). The
 * parked inputs are dropped on purpose (the run never starts); it ends `cancelled` and is forgotten after the run
 * retention like any ended run.
 * @returns the state (`s` itself)
 */
export function cancelParkedStart(s: RunState, reason: string, at: number): RunState {
  const dropped = s.parked?.length ?? 0;
  delete s.parked;
  s.timers = {};
  s.status = 'cancelled';
  s.endedAt = at;
  s.updatedAt = at;
  s.sequence = 1; // supersedes the parked snapshots (sequence 0)
  log(s, at, 'RunCancelled', `${reason} (never started; ${dropped} parked inputs dropped)`);
  return s;
}

function log(s: RunState, at: number, event: string, detail: string): void {
  s.timeline.push({ at, event, detail });
  if (s.timeline.length > TIMELINE_MAX) s.timeline.splice(0, s.timeline.length - TIMELINE_MAX);
}

/**
 * Takes the run's parked inputs out, in place, with its `unpark` timer.
 * @returns the parked inputs in the order they came, and the run's state without them: undefined for a parked
 *   StartRun's run (its start, the first parked input, makes it anew).
 */
export function unparkInPlace(s: RunState): { inputs: ParkedInput[]; state: RunState | undefined } {
  const inputs = s.parked ?? [];
  delete s.parked;
  delete s.timers[UNPARK_TIMER];
  if (isParkedStart(s)) return { inputs, state: undefined };
  log(s, s.updatedAt, 'InputsUnparked', `${inputs.length} inputs`);
  return { inputs, state: s };
}
