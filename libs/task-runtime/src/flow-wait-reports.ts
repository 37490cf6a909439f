import type { EventCodec } from '@keyflow/contracts';
import { newMetadata } from '@keyflow/contracts';
import type { BatchingProducer } from '@keyflow/kafka';
import type { Logger, TraceContext } from '@keyflow/observability';
import { traceHeaders } from '@keyflow/observability';
import { Topic, type TaskCommand, type TaskWaiting } from '@keyflow/schemas';

/** What a wait report needs to know of its worker. */
export interface FlowWaitReportsOptions {
  codec: EventCodec;
  /** The producer of task.results (the same one as the results, so a report never overtakes an earlier result). */
  results: BatchingProducer;
  /** Interval between two reports of one waiting attempt, in ms (WORKER_FLOW_WAIT_REPORT_MS, > 0). */
  intervalMs: number;
  /** `host/pid` of the worker (TaskWaiting.workerId). */
  workerId: string;
  logger: Logger;
}

/**
 * The TaskWaiting reports of one attempt that waits for its flow-control admission (docs/workers.md "Flow control"):
 * one at once (`admitted` false), one every `intervalMs` while it waits, and one at its admission (`admitted` true);
 * the orchestrator restarts the step's deadline at each, so the wait does not use the step's time. A report is sent
 * and not awaited: one that cannot be sent is logged and the wait goes on (the step's deadline then runs from the
 * last report that arrived, as when the worker dies while waiting).
 */
export class FlowWaitReports {
  private readonly since = Date.now();
  private readonly timer: NodeJS.Timeout;
  private stopped = false;

  /** Starts reporting (the first report is sent now). */
  constructor(
    private readonly o: FlowWaitReportsOptions,
    private readonly cmd: TaskCommand,
    private readonly trace: TraceContext,
  ) {
    this.send(false);
    this.timer = setInterval(() => this.send(false), o.intervalMs);
    this.timer.unref();
  }

  /** The attempt was admitted: the last report (`admitted` true), then no more. */
  admitted(): void {
    if (this.stopped) return;
    this.stop();
    this.send(true);
  }

  /** No more reports (the wait was cancelled, or it ended). Idempotent. */
  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }

  private send(admitted: boolean): void {
    const { cmd, o } = this;
    const meta = newMetadata('TaskWaiting', {
      key: cmd.runId,
      correlationId: cmd.metadata.correlationId,
      causationId: cmd.metadata.eventId,
      traceparent: this.trace.traceparent,
      tracestate: this.trace.tracestate,
    });
    let value: Buffer;
    try {
      value = o.codec.encode(Topic.TASK_RESULTS, 'TaskWaiting', {
        metadata: meta,
        runId: cmd.runId,
        stepId: cmd.stepId,
        taskType: cmd.taskType,
        attempt: cmd.attempt,
        idempotencyKey: cmd.idempotencyKey,
        reason: 'FLOW_LIMIT',
        admitted,
        waitedMs: Date.now() - this.since,
        workerId: o.workerId,
      } satisfies TaskWaiting);
    } catch (err) {
      o.logger.warn({ err: (err as Error).message, stepId: cmd.stepId }, 'flow wait report not encoded');
      return;
    }
    o.results
      .send(o.codec.physical(Topic.TASK_RESULTS), {
        key: cmd.runId,
        value,
        headers: traceHeaders(this.trace) ?? {},
      })
      .catch((err: unknown) =>
        o.logger.warn(
          { err: (err as Error).message, runId: cmd.runId, stepId: cmd.stepId, admitted },
          'flow wait report not sent: the step deadline runs from the last one that was',
        ),
      );
  }
}
