import type { WorkflowDefinition } from './dsl';
import {
  copyRunState,
  reduceInPlace,
  type Decision,
  type ReduceOptions,
  type RunState,
  type WorkflowInput,
} from './reducer';
import { cancelParkedStart, parkedRunState, parkInPlace, unparkInPlace, type ParkedInput } from './parked';

/** A change made to a run's working copy: an input applied with a definition, or an input parked or unparked. */
type Change =
  | { input: WorkflowInput; def: WorkflowDefinition }
  | { edit: (s: RunState | undefined) => RunState | undefined };

interface Working {
  state: RunState | undefined;
  /** The changes made to `state` since it was copied from the committed state, in order (for a replay). */
  applied: Change[];
}

/**
 * The runs a batch changes, kept apart from the committed ones until the batch's transaction commits.
 *
 * A run is copied (`copyRunState`: everything but its map items' segments, which are shared and replaced on write)
 * once per batch, on its first input, and every later input of the batch is applied to that copy in place
 * (`reduceInPlace`), so a batch costs what its inputs touch plus one small copy per run: a map step's item results
 * cost about the same at 100,000 items as at 1,000. The committed states are never
 * changed, so an aborted transaction leaves them as they were.
 *
 * When a definition's function throws while an input is applied (the copy may then be half changed), the run's copy
 * is made again from the committed state and the batch's earlier inputs of that run are applied again: the reducer
 * is deterministic (time is the input's `at`), so this yields the state as it was before the failed input, and the
 * error is rethrown for the caller to dead-letter that one input.
 */
export class PendingRuns {
  private readonly working = new Map<string, Working>();

  constructor(
    /** The committed state of a run, or undefined for a run not known. Must not be changed by the caller meanwhile. */
    private readonly committed: (runId: string) => RunState | undefined,
    private readonly opts: ReduceOptions = {},
  ) {}

  /** The run's state as this batch has it so far (not a copy: do not change it). */
  get(runId: string): RunState | undefined {
    const w = this.working.get(runId);
    return w ? w.state : this.committed(runId);
  }

  /**
   * Applies `input` with definition `def` (the run's, or for a start the requested one).
   * @returns the reducer's decision; `state` is the batch's working copy of the run.
   * @throws whatever a definition's function throws; the run's working copy is then as before this input.
   */
  apply(def: WorkflowDefinition, input: WorkflowInput): Decision {
    let w = this.working.get(input.runId);
    if (!w) {
      // Kept even when the input is ignored: the batch's later inputs of the run (stale duplicates of a big map's
      // results, say) then reuse the copy instead of copying the run again each.
      const committed = this.committed(input.runId);
      w = { state: committed && copyRunState(committed), applied: [] };
      this.working.set(input.runId, w);
    }
    let d: Decision;
    try {
      d = reduceInPlace(def, w.state, input, this.opts);
    } catch (err) {
      this.replay(input.runId, w);
      throw err;
    }
    if (d.ignored) return d;
    w.state = d.state;
    w.applied.push({ input, def });
    return d;
  }

  /**
   * Parks `p` on run `runId` at `at` (ms), after its other parked inputs (see parked.ts); a run not known is made a
   * parked StartRun's run from `start` (the StartRun being parked).
   * @returns the run's parked inputs now (the batch's working copy)
   */
  park(
    runId: string,
    p: ParkedInput,
    at: number,
    start?: { workflow: string; version: number | null; businessKey: string },
  ): number {
    const edit = (s: RunState | undefined) =>
      parkInPlace(s ?? parkedRunState({ runId, at, ...start! }), p, at);
    const w = this.workingCopy(runId);
    w.state = edit(w.state);
    w.applied.push({ edit });
    return w.state.parked!.length;
  }

  /**
   * Takes run `runId`'s parked inputs out of its working copy, to be applied now (in order, before anything newer).
   * A parked StartRun's run is then unknown again until its start is applied.
   */
  unpark(runId: string): ParkedInput[] {
    const w = this.workingCopy(runId);
    if (!w.state?.parked?.length) return [];
    const edit = (s: RunState | undefined) => (s ? unparkInPlace(s).state : s);
    const inputs = w.state.parked;
    w.state = edit(w.state);
    w.applied.push({ edit });
    return inputs;
  }

  /** Ends a parked StartRun's run without starting it (see `cancelParkedStart`), in this batch's copy. */
  cancelParked(runId: string, reason: string, at: number): void {
    const w = this.workingCopy(runId);
    if (!w.state) return;
    const edit = (s: RunState | undefined) => s && cancelParkedStart(s, reason, at);
    w.state = edit(w.state);
    w.applied.push({ edit });
  }

  /** The runs this batch changed, by run id, with their new states (what to snapshot and, after the commit, keep). */
  changed(): Map<string, RunState> {
    const out = new Map<string, RunState>();
    for (const [id, w] of this.working) if (w.state && w.applied.length > 0) out.set(id, w.state);
    return out;
  }

  /**
   * The runs this batch removed: known before it and unknown now (a parked StartRun's run whose start, applied at
   * last, was dead-lettered). Their wf.state key gets a tombstone.
   */
  removed(): string[] {
    const out: string[] = [];
    for (const [id, w] of this.working)
      if (!w.state && w.applied.length > 0 && this.committed(id)) out.push(id);
    return out;
  }

  private workingCopy(runId: string): Working {
    let w = this.working.get(runId);
    if (!w) {
      const committed = this.committed(runId);
      w = { state: committed && copyRunState(committed), applied: [] };
      this.working.set(runId, w);
    }
    return w;
  }

  /**
   * Takes back the run's last applied input (its outputs could not be encoded: the caller dead-letters it). The
   * run's copy is made again from the committed state with the batch's other inputs of the run.
   */
  undoLast(runId: string): void {
    const w = this.working.get(runId);
    if (!w || w.applied.length === 0) return;
    w.applied.pop();
    this.replay(runId, w);
  }

  private replay(runId: string, w: Working): void {
    const committed = this.committed(runId);
    let state = committed && copyRunState(committed);
    for (const c of w.applied)
      state = 'edit' in c ? c.edit(state) : reduceInPlace(c.def, state, c.input, this.opts).state;
    w.state = state;
  }
}
