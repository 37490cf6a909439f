import type { RunState } from '@keyflow/workflow';

/**
 * Runs by workflow and status, kept as runs change, so that what reads them costs the distinct workflows and
 * statuses, not every run (ended runs are held until their retention): a partition's owned runs (ownership.ts
 * `holdRun`, `dropRun`: the `orchestrator_runs` gauge) and the read model's runs (`RunReadModel.workflowStats`:
 * GET /ops/overview).
 */
export class RunCounts {
  private readonly counts = new Map<string, { workflow: string; status: string; count: number }>();

  /** Counts `s` (`by` = -1: no longer). */
  add(s: Pick<RunState, 'workflow' | 'status'>, by = 1): void {
    const key = `${s.workflow}\u0000${s.status}`;
    const e = this.counts.get(key);
    if (!e) {
      if (by > 0) this.counts.set(key, { workflow: s.workflow, status: s.status, count: by });
      return;
    }
    e.count += by;
    if (e.count <= 0) this.counts.delete(key);
  }

  /** Each workflow and status with its count of runs (> 0). */
  values(): IterableIterator<{ workflow: string; status: string; count: number }> {
    return this.counts.values();
  }
}
