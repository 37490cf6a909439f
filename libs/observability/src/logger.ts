import pino, { type Logger } from 'pino';
import { activeTraceIds } from './trace';

export type { Logger } from 'pino';

/**
 * The process logger: JSON lines on stdout (pino), level from LOG_LEVEL (default info). Child loggers carry
 * `correlationId` (the run), `causationId`, `topic`, `partition`, `offset` so one run can be followed across services.
 * Fields named in `redact` (PII) are replaced with "[redacted]". A line logged inside a span carries its `trace_id` and
 * `span_id`.
 */
export function createLogger(
  service: string,
  /** `stderr`: log lines go to file descriptor 2 (a CLI keeps stdout for its output); default stdout. */
  opts: { level?: string; redact?: string[]; stream?: 'stdout' | 'stderr' } = {},
): Logger {
  const options = {
    name: service,
    level: opts.level ?? process.env.LOG_LEVEL ?? 'info',
    base: { service, pid: process.pid },
    redact: { paths: opts.redact ?? ['*.password', '*.email', '*.authorization'], censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
    // The active span's ids on every line logged inside one (OpenTelemetry log correlation: trace_id, span_id).
    mixin: activeTraceIds,
  };
  return opts.stream === 'stderr' ? pino(options, pino.destination({ dest: 2, sync: true })) : pino(options);
}
