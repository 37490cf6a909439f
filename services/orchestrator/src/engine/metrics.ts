import { metric, type Counter, type Gauge, type Histogram, type Registry } from '@keyflow/observability';

export interface OrchestratorMetrics {
  /** The registry these are in (consumers register the undecodable-batch metrics there too). */
  registry: Registry;
  started: Counter;
  finished: Counter<'status'>;
  transitions: Counter;
  /** Records of one fetched batch each committed transaction of inputs took (ignored and dead-lettered included). */
  transactionInputs: Histogram;
  ignored: Counter<'reason'>;
  timersFired: Counter;
  restores: Counter;
  /** Ended runs forgotten past their retention (tombstoned on wf.state). */
  forgotten: Counter;
  snapshotsSkipped: Counter<'reason'>;
  dlq: Counter;
  runSeconds: Histogram<'workflow' | 'status'>;
  /** Runs of the partitions this instance owns, by workflow and status (set at each scrape: see Engine). */
  runsInFlight: Gauge<'workflow' | 'status'>;
  /** From a command's dispatch to its result being applied, per task type (seconds). */
  stepLatency: Histogram<'task_type'>;
  /** Task results applied, by task type, outcome and whether the attempt was a retry (the console's retry rate). */
  taskResults: Counter<'task_type' | 'outcome' | 'retry'>;
  /** Set by the LagMonitor: records a group still has to read (read_committed), per group, topic and partition. */
  consumerLag: Gauge<'group' | 'topic' | 'partition'>;
  /** Set by the LagMonitor: age of the oldest record a group has not read, seconds. */
  oldestUnread: Gauge<'group' | 'topic' | 'partition'>;
  /** Set by the LagMonitor: records in each DLQ topic not yet redriven or discarded (the DLQ ledger). */
  dlqRecords: Gauge<'topic'>;
  /** Set by the LagMonitor: when its last pass began (seconds since epoch), so a stale figure is visible. */
  lagScrapedAt: Gauge;
  /**
   * Where runsInFlight reads the runs from at each scrape: counts by workflow and status (the engine sets it to its
   * owned partitions' RunCounts; a pair may come once per partition, and is summed).
   */
  setRunsSource(source: () => Iterable<{ workflow: string; status: string; count: number }>): void;
  /**
   * Inputs parked on the runs of the partitions this instance owns, by the workflow and version they wait for
   * (`latest` for a StartRun without a version); set at each scrape from {@link setParkedSource}.
   */
  parkedInputs: Gauge<'workflow' | 'version'>;
  /** Where parkedInputs reads the parked inputs from at each scrape (the engine sets it). */
  setParkedSource(source: () => Iterable<{ workflow: string; version: string; inputs: number }>): void;
}

/**
 * The orchestrator's metrics, registered in `r`: runs, inputs and lag (see {@link OrchestratorMetrics}), and the two
 * gauges set at each scrape from the sources the engine sets.
 */
export function orchestratorMetrics(r: Registry): OrchestratorMetrics {
  let runs: () => Iterable<{ workflow: string; status: string; count: number }> = () => [];
  let parked: () => Iterable<{ workflow: string; version: string; inputs: number }> = () => [];
  return {
    setRunsSource: (source) => (runs = source),
    setParkedSource: (source) => (parked = source),
    parkedInputs: metric.gauge(
      r,
      'orchestrator_parked_inputs',
      'Inputs parked on runs of the partitions this instance owns, waiting for an instance that has their workflow version (a rolling deploy: see docs/guarantees/deploys-and-client-retries.md), by workflow and version.',
      ['workflow', 'version'],
      (g) => {
        g.reset();
        for (const p of parked()) g.set({ workflow: p.workflow, version: p.version }, p.inputs);
      },
    ) as Gauge<'workflow' | 'version'>,
    registry: r,
    ...runMetrics(r),
    ...inputMetrics(r),
    runsInFlight: metric.gauge(
      r,
      'orchestrator_runs',
      'Runs this instance holds (its partitions), by workflow and status; ended runs until their retention.',
      ['workflow', 'status'],
      (g) => {
        g.reset();
        for (const s of runs()) g.inc({ workflow: s.workflow, status: s.status }, s.count);
      },
    ) as Gauge<'workflow' | 'status'>,
    ...lagMetrics(r),
  };
}

/** Runs started, finished and forgotten, their duration, and the transitions applied to them. */
function runMetrics(
  r: Registry,
): Pick<
  OrchestratorMetrics,
  'started' | 'finished' | 'runSeconds' | 'transitions' | 'restores' | 'forgotten'
> {
  return {
    started: metric.counter(r, 'orchestrator_runs_started_total', 'Runs started.'),
    finished: metric.counter(r, 'orchestrator_runs_finished_total', 'Runs that reached a terminal status.', [
      'status',
    ]) as Counter<'status'>,
    runSeconds: metric.histogram(
      r,
      'orchestrator_run_duration_seconds',
      'Start-to-finish time of runs (the chain time), seconds, by workflow and terminal status.',
      ['workflow', 'status'],
      [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600],
    ) as Histogram<'workflow' | 'status'>,
    transitions: metric.counter(
      r,
      'orchestrator_transitions_total',
      'Inputs applied to run state (step transitions).',
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
  };
}

/** Inputs applied, ignored or dead-lettered (per transaction, per task result); snapshots the read model skipped. */
function inputMetrics(
  r: Registry,
): Pick<
  OrchestratorMetrics,
  'transactionInputs' | 'ignored' | 'timersFired' | 'dlq' | 'stepLatency' | 'taskResults' | 'snapshotsSkipped'
> {
  return {
    transactionInputs: metric.histogram(
      r,
      'orchestrator_transaction_inputs',
      'Records of wf.requests or task.results per committed engine transaction (one fetched batch each; ignored and dead-lettered records included); _count is those transactions (take-over barriers and retention sweeps not counted).',
      [],
      [1, 4, 16, 64, 256, 1024, 4096],
    ),
    ignored: metric.counter(
      r,
      'orchestrator_inputs_ignored_total',
      'Inputs that changed nothing, by reason (a code of libs/workflow IGNORE_REASONS: STALE_RESULT, STALE_TIMER, DUPLICATE_START, UNKNOWN_RUN, RUN_ENDED, SIGNAL_BUFFER_FULL, NOT_APPLICABLE, UNKNOWN_DEFINITION, DUPLICATE_REQUEST).',
      ['reason'],
    ) as Counter<'reason'>,
    timersFired: metric.counter(
      r,
      'orchestrator_timers_fired_total',
      'Durable timers published as TimerFired.',
    ),
    dlq: metric.counter(
      r,
      'orchestrator_dlq_total',
      'Orchestrator inputs sent to a DLQ (undecodable or invalid).',
    ),
    stepLatency: metric.histogram(
      r,
      'orchestrator_step_latency_seconds',
      'Schedule-to-result time of task steps: from the command being dispatched to its result applied, seconds.',
      ['task_type'],
    ) as Histogram<'task_type'>,
    taskResults: metric.counter(
      r,
      'orchestrator_task_results_total',
      'Task results applied to runs, by task type, outcome (completed, failed) and retry (true when the attempt was not the first).',
      ['task_type', 'outcome', 'retry'],
    ) as Counter<'task_type' | 'outcome' | 'retry'>,
    snapshotsSkipped: metric.counter(
      r,
      'orchestrator_read_model_snapshots_skipped_total',
      'wf.state records the read model skipped: undecodable, a state that is not JSON or not a run.',
      ['reason'],
    ) as Counter<'reason'>,
  };
}

/** What the LagMonitor sets: consumer lag, the age of the oldest unread record, DLQ depths, its last pass. */
function lagMetrics(
  r: Registry,
): Pick<OrchestratorMetrics, 'consumerLag' | 'oldestUnread' | 'dlqRecords' | 'lagScrapedAt'> {
  return {
    consumerLag: metric.gauge(
      r,
      'consumer_lag_records',
      'Records a consumer group still has to read up to the last stable offset (no markers, no aborted records).',
      ['group', 'topic', 'partition'],
    ) as Gauge<'group' | 'topic' | 'partition'>,
    oldestUnread: metric.gauge(
      r,
      'consumer_oldest_unread_age_seconds',
      'Age of the oldest record a consumer group has not read yet (0 when none), seconds.',
      ['group', 'topic', 'partition'],
    ) as Gauge<'group' | 'topic' | 'partition'>,
    dlqRecords: metric.gauge(
      r,
      'dlq_records',
      'Records in each DLQ topic (read_committed) not yet redriven or discarded (the dlq.handled ledger).',
      ['topic'],
    ) as Gauge<'topic'>,
    lagScrapedAt: metric.gauge(
      r,
      'consumer_lag_scraped_at_seconds',
      'When the lag monitor began its last finished pass (seconds since epoch): its figures are at least that recent.',
    ),
  };
}
