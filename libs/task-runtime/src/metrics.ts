import { metric, type Registry, type Counter, type Gauge, type Histogram } from '@keyflow/observability';
import { MAX_WAVE_TASKS } from './task-executor';

/** The worker's Prometheus metrics (names prefixed keyflow_). */
export interface WorkerMetrics {
  tasks: Counter<'type' | 'outcome'>;
  attempts: Counter<'type' | 'result'>;
  retries: Counter<'type'>;
  replayed: Counter<'type'>;
  fenced: Counter<'type'>;
  leaseLost: Counter<'type'>;
  dlq: Counter<'type' | 'error_class'>;
  handlerSeconds: Histogram<'type'>;
  waveTasks: Histogram;
  inFlight: Gauge;
  handlersRunning: Gauge;
  handlersWaiting: Gauge;
  pausedPartitions: Gauge;
  flowWaiting: Gauge<'task_type'>;
  flowAdmitted: Counter<'task_type'>;
  flowStoreErrors: Counter<'task_type'>;
}

/** Buckets of the wave size histogram: powers of two up to a wave's most ({@link MAX_WAVE_TASKS}). */
const WAVE_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128].filter((b) => b < MAX_WAVE_TASKS).concat(MAX_WAVE_TASKS);

export function workerMetrics(r: Registry): WorkerMetrics {
  return {
    tasks: metric.counter(
      r,
      'worker_tasks_total',
      'Task commands finished, by outcome (completed, failed).',
      ['type', 'outcome'],
    ) as Counter<'type' | 'outcome'>,
    attempts: metric.counter(
      r,
      'worker_task_attempts_total',
      'Handler attempts, by result (ok or the error class).',
      ['type', 'result'],
    ) as Counter<'type' | 'result'>,
    retries: metric.counter(r, 'worker_task_retries_total', 'Attempts retried after a retryable error.', [
      'type',
    ]) as Counter<'type'>,
    replayed: metric.counter(
      r,
      'worker_task_replayed_total',
      'Redelivered commands answered from the completion record.',
      ['type'],
    ) as Counter<'type'>,
    fenced: metric.counter(
      r,
      'worker_task_fenced_total',
      'Commands not run because their step was compensated first (the compensation fenced its key).',
      ['type'],
    ) as Counter<'type'>,
    leaseLost: metric.counter(
      r,
      'worker_lease_lost_total',
      'Attempts aborted because the idempotency lease was lost (nothing recorded; the command is retried).',
      ['type'],
    ) as Counter<'type'>,
    dlq: metric.counter(r, 'worker_dlq_total', 'Messages sent to the DLQ.', [
      'type',
      'error_class',
    ]) as Counter<'type' | 'error_class'>,
    handlerSeconds: metric.histogram(
      r,
      'worker_handler_duration_seconds',
      'Handler time per attempt, seconds.',
      ['type'],
    ) as Histogram<'type'>,
    waveTasks: metric.histogram(
      r,
      'worker_wave_tasks',
      `Task commands leased together in one begin call (a wave: at most ${MAX_WAVE_TASKS} of those handed over in one event-loop turn).`,
      [],
      WAVE_BUCKETS,
    ) as Histogram,
    inFlight: metric.gauge(r, 'worker_in_flight', 'Messages dispatched and not completed.'),
    handlersRunning: metric.gauge(r, 'worker_handlers_running', 'Handler calls running now.'),
    handlersWaiting: metric.gauge(
      r,
      'worker_handlers_waiting',
      'Task attempts waiting for a handler slot (WORKER_MAX_CONCURRENT_HANDLERS are running).',
    ),
    pausedPartitions: metric.gauge(
      r,
      'worker_paused_partitions',
      'Partitions that cannot dispatch more work now.',
    ),
    ...flowMetrics(r),
  };
}

/** The flow-control metrics (see FlowLimiter). */
function flowMetrics(r: Registry): Pick<WorkerMetrics, 'flowWaiting' | 'flowAdmitted' | 'flowStoreErrors'> {
  return {
    flowWaiting: metric.gauge(
      r,
      'worker_flow_waiting',
      'Task attempts waiting in this process for their flow-control admission (WORKER_FLOW_LIMITS).',
      ['task_type'],
    ) as Gauge<'task_type'>,
    flowAdmitted: metric.counter(
      r,
      'worker_flow_admitted_total',
      'Task attempts admitted by flow control (rate(): admitted/s).',
      ['task_type'],
    ) as Counter<'task_type'>,
    flowStoreErrors: metric.counter(
      r,
      'worker_flow_store_errors_total',
      'Admission tries the flow limit store did not answer (the waiting tasks keep waiting).',
      ['task_type'],
    ) as Counter<'task_type'>,
  };
}
