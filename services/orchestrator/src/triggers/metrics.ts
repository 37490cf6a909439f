import { metric, type Counter, type Gauge, type Registry } from '@keyflow/observability';
import type { TriggerStatus } from './status';

/** The topic triggers' metrics (Prometheus names under the registry's prefix). */
export interface TriggerMetrics {
  /** Source records by outcome: applied (a StartRun or SignalRun written), dead_lettered, skipped_replay. */
  records: Counter<'trigger' | 'outcome'>;
  /** Transactions of a trigger partition that failed (aborted; the partition is read again from its mark). */
  aborted: Counter<'trigger'>;
}

/**
 * Registers the triggers' metrics in `r`; the gauges (lag, in-flight runs, held records, paused) are set at each
 * scrape from `statuses`.
 */
export function triggerMetrics(r: Registry, statuses: () => TriggerStatus[]): TriggerMetrics {
  const gauge = (name: string, help: string, value: (s: TriggerStatus) => number) =>
    metric.gauge(r, name, help, ['trigger'], (g) => {
      g.reset();
      for (const s of statuses()) g.set({ trigger: s.name }, value(s));
    }) as Gauge<'trigger'>;
  gauge(
    'trigger_lag_records',
    "Records of a topic trigger's source (and redrive) topic not yet read by its group, over this instance's partitions.",
    (s) => s.lag,
  );
  gauge(
    'trigger_in_flight_runs',
    'Runs a start trigger started on this instance that have not ended (reading pauses at maxInFlight).',
    (s) => s.inFlight,
  );
  gauge(
    'trigger_held_records',
    "Records a trigger read and holds behind their key's previous run, or waiting for their signal's run.",
    (s) => s.held,
  );
  gauge('trigger_paused', 'Whether a trigger paused reading for backpressure (1) or not (0).', (s) =>
    s.paused ? 1 : 0,
  );
  return {
    records: metric.counter(
      r,
      'trigger_records_total',
      'Source records a topic trigger handled, by outcome.',
      ['trigger', 'outcome'],
    ) as Counter<'trigger' | 'outcome'>,
    aborted: metric.counter(
      r,
      'trigger_transactions_aborted_total',
      "A trigger partition's transactions that failed; its records are read again from its last mark.",
      ['trigger'],
    ) as Counter<'trigger'>,
  };
}
