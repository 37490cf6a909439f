export { createLogger, type Logger } from './logger';
export {
  createMetricsRegistry,
  metric,
  LATENCY_BUCKETS_S,
  Registry,
  Counter,
  Gauge,
  Histogram,
} from './metrics';
export {
  activeContextFollowsCalls,
  activeTraceIds,
  contextFromRecord,
  headersWithTrace,
  LINKS_DROPPED_ATTRIBUTE,
  noTracerProvider,
  SpanLinks,
  spanLinkLimit,
  startTracing,
  traceContextOf,
  traceHeaders,
  traceIdsOf,
  tracer,
  TRACER_NAME,
  type TraceContext,
  type Tracing,
} from './trace';
export {
  ComponentHealth,
  exitOnComponentFailure,
  exitOnSignals,
  FATAL_EXIT_DELAY_MS,
  type ComponentFailure,
  type DegradedCondition,
} from './health';
export { cpuMeter, cpuSeconds, localStackPids, peakRssMiB } from './process-stats';
