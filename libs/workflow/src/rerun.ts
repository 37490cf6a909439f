import { stepStateOf, TERMINAL, type RunState } from './reducer';

/** The fields of a TaskCommand that name the step attempt it asks for. */
export interface TaskCommandRef {
  runId: string;
  stepId: string;
  /** 1-based attempt of the step. */
  attempt: number;
}

/** What the engine's view of a run must show: the run API's `GET /runs/:id` answer or the read model's state. */
export type RunView = Pick<RunState, 'runId' | 'status' | 'steps'>;

/**
 * What is known of a task command a tool would deliver again (a replay moving a group back, a DLQ redrive). Each
 * field left undefined was not looked up.
 */
export interface RerunFacts {
  /**
   * The worker holds a completion record or a fence for the command's key and attempt (`IdempotencyStore.peek`:
   * completed, failed or fenced): a delivery re-publishes the stored result, its handler does not run.
   */
  stored?: boolean;
  /** The engine's view of the run; null when the orchestrator does not know the run (never started, or forgotten). */
  run?: RunView | null;
  /** How old the record to deliver is, in ms (now less its Kafka timestamp). */
  ageMs?: number;
  /** How long the workers keep completion records and fences, in ms (WORKER_COMPLETION_TTL_MS). */
  completionTtlMs?: number;
}

/** Why a command would run its handler again for nothing (see {@link rerunVerdict}). */
export const RERUN_CODES = {
  /** The run ended (completed, failed, compensated, cancelled): nothing awaits the step. */
  runEnded: 'RUN_ENDED',
  /** The run goes on, but its step is not waiting for this attempt (done, failed, another attempt, compensated). */
  stepNotAwaited: 'STEP_NOT_AWAITED',
  /** The orchestrator does not know the run (never started, or forgotten after its retention). */
  runNotFound: 'RUN_NOT_FOUND',
  /** The record is older than the workers' completion records and fences: they may be gone. */
  olderThanFences: 'OLDER_THAN_FENCES',
  /** No completion record, and the run's status could not be asked. */
  unknown: 'RUN_STATUS_UNKNOWN',
} as const;
export type RerunCode = (typeof RERUN_CODES)[keyof typeof RERUN_CODES];

export type RerunVerdict =
  | {
      /** The delivery runs no side effect a second time. */
      safe: true;
      /** `republished`: the worker answers from its stored record; `awaited`: the engine waits for this attempt. */
      effect: 'republished' | 'awaited';
    }
  | { safe: false; code: RerunCode; reason: string };

/**
 * Margin before a completion record or fence expires within which a record counts as older than it, in ms: a tenth
 * of the TTL, at most one hour (a delivery takes time to reach a worker).
 */
export const fenceExpiryMarginMs = (completionTtlMs: number) => Math.min(completionTtlMs / 10, 3_600_000);

/**
 * Whether delivering a task command again (replay, DLQ redrive) could run its handler when nothing awaits it: the one
 * check every operator tool applies before it re-delivers task commands. In order:
 * 1. a stored record (result or fence) for the attempt: safe, the worker re-publishes it;
 * 2. the engine's view, when known: safe only while the run is not ended and its step is `scheduled` at this
 *    attempt; otherwise unsafe, naming the run, its status and why (the worker's records may be gone: completion
 *    records and fences live WORKER_COMPLETION_TTL_MS, a DLQ keeps records by its own retention);
 * 3. without the engine's view: unsafe when the record is older than the completion TTL less
 *    {@link fenceExpiryMarginMs}, or when no record was found.
 * Unsafe deliveries are refused by the tools unless the operator says so (`--allow-rerun`, `allowRerun`).
 */
export function rerunVerdict(cmd: TaskCommandRef, facts: RerunFacts): RerunVerdict {
  if (facts.stored) return { safe: true, effect: 'republished' };
  const what = `step ${cmd.stepId} (attempt ${cmd.attempt}) of run ${cmd.runId}`;
  const run = facts.run;
  if (run === null)
    return {
      safe: false,
      code: RERUN_CODES.runNotFound,
      reason: `run ${cmd.runId} is not known to the orchestrator (never started, or forgotten after its retention): ${what} would run with nothing awaiting it`,
    };
  if (run) {
    if (TERMINAL.has(run.status))
      return {
        safe: false,
        code: RERUN_CODES.runEnded,
        reason:
          `run ${cmd.runId} is ${run.status}: ${what} is no longer awaited` +
          (run.status === 'compensated' || run.status === 'cancelled'
            ? ' (its completed steps were compensated; running it again leaves an effect nothing undoes)'
            : ''),
      };
    const step = run.steps[cmd.stepId] ?? stepStateOf(run as RunState, cmd.stepId);
    if (!step || step.status !== 'scheduled' || step.attempt !== cmd.attempt)
      return {
        safe: false,
        code: RERUN_CODES.stepNotAwaited,
        reason:
          `run ${cmd.runId} is ${run.status}, but ${what} is no longer awaited: the step is ` +
          (step ? `${step.status} at attempt ${step.attempt}` : 'not in the run'),
      };
    return { safe: true, effect: 'awaited' };
  }
  if (
    facts.ageMs !== undefined &&
    facts.completionTtlMs !== undefined &&
    facts.ageMs >= facts.completionTtlMs - fenceExpiryMarginMs(facts.completionTtlMs)
  )
    return {
      safe: false,
      code: RERUN_CODES.olderThanFences,
      reason:
        `${what}: the record is ${Math.round(facts.ageMs / 1000)} s old, older than the workers' completion records ` +
        `and fences (WORKER_COMPLETION_TTL_MS=${facts.completionTtlMs}) less a margin: they may be gone, and the run's status is not known`,
    };
  return {
    safe: false,
    code: RERUN_CODES.unknown,
    reason:
      `${what}: ${facts.stored === false ? 'no completion record or fence' : 'no completion record looked up'}, ` +
      "and the run's status is not known (set KEYFLOW_API_URL): its handler would run again",
  };
}
