import { metric, type Counter, type Histogram, type Registry } from '@keyflow/observability';

export interface OrchestratorMetrics {
  /** The registry these are in (consumers register the undecodable-batch metrics there too). */
  registry: Registry;
  started: Counter;
  finished: Counter<'status'>;
  transitions: Counter;
  ignored: Counter<'reason'>;
  timersFired: Counter;
  restores: Counter;
  /** Ended runs forgotten past their retention (tombstoned on wf.state). */
  forgotten: Counter;
  snapshotsSkipped: Counter<'reason'>;
  dlq: Counter;
  runSeconds: Histogram<'status'>;
}

export function orchestratorMetrics(r: Registry): OrchestratorMetrics {
  return {
    registry: r,
    started: metric.counter(r, 'orchestrator_runs_started_total', 'Runs started.'),
    finished: metric.counter(r, 'orchestrator_runs_finished_total', 'Runs that reached a terminal status.', [
      'status',
    ]) as Counter<'status'>,
    transitions: metric.counter(
      r,
      'orchestrator_transitions_total',
      'Inputs applied to run state (step transitions).',
    ),
    ignored: metric.counter(
      r,
      'orchestrator_inputs_ignored_total',
      'Inputs that changed nothing: stale or duplicate results and timers, unknown runs.',
      ['reason'],
    ) as Counter<'reason'>,
    timersFired: metric.counter(
      r,
      'orchestrator_timers_fired_total',
      'Durable timers published as TimerFired.',
    ),
    restores: metric.counter(
      r,
      'orchestrator_partition_restores_total',
      'Partitions restored from wf.state on assignment.',
    ),
    forgotten: metric.counter(
      r,
      'orchestrator_runs_forgotten_total',
      'Ended runs forgotten past ORCHESTRATOR_RUN_RETENTION_MS (a tombstone written to wf.state).',
    ),
    snapshotsSkipped: metric.counter(
      r,
      'orchestrator_read_model_snapshots_skipped_total',
      'wf.state records the read model skipped: undecodable, a state that is not JSON or not a run.',
      ['reason'],
    ) as Counter<'reason'>,
    dlq: metric.counter(
      r,
      'orchestrator_dlq_total',
      'Orchestrator inputs sent to a DLQ (undecodable or invalid).',
    ),
    runSeconds: metric.histogram(
      r,
      'orchestrator_run_duration_seconds',
      'Start-to-finish time of runs, seconds.',
      ['status'],
      [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    ) as Histogram<'status'>,
  };
}
