import {
  context,
  diag,
  DiagConsoleLogger,
  DiagLogLevel,
  isSpanContextValid,
  propagation,
  ProxyTracerProvider,
  ROOT_CONTEXT,
  trace,
  type Context,
  type Span,
  type SpanContext,
  type TextMapGetter,
  type TextMapSetter,
  type Tracer,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';

/** Kafka record headers as kafkajs types them (`IHeaders`), declared here so this library does not load kafkajs. */
type IHeaders = { [key: string]: Buffer | string | (Buffer | string)[] | undefined };

/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/) as carried by keyflow: in Kafka record headers
 * `traceparent` and `tracestate` (the names OpenTelemetry's Kafka instrumentations use) and, for consumers that read
 * only the value, in each event's `metadata.traceparent` / `metadata.tracestate`.
 */
export interface TraceContext {
  traceparent: string | null;
  tracestate: string | null;
}

/** Name of the tracer every keyflow span comes from (the instrumentation scope). */
export const TRACER_NAME = 'keyflow';

/** The tracer of keyflow's spans (a no-op tracer until {@link startTracing} runs). */
export const tracer = (): Tracer => trace.getTracer(TRACER_NAME);

/** The provider the API falls back to when none is registered (a fresh proxy's delegate is that shared instance). */
const NOOP_TRACER_PROVIDER = new ProxyTracerProvider().getDelegate();

/**
 * Whether no tracer provider is registered in this process (ours, from {@link startTracing} with an exporter, or any
 * other SDK's): every span is then a no-op that carries its parent's span context (OpenTelemetry API, `NoopTracer`:
 * a valid parent's context, else the invalid one), so a caller may use the parent context in place of a child
 * span's and save making the span. Cheap enough to call per batch; answers for the provider registered now.
 */
export function noTracerProvider(): boolean {
  const provider = trace.getTracerProvider();
  return provider instanceof ProxyTracerProvider && provider.getDelegate() === NOOP_TRACER_PROVIDER;
}

/** Kafka headers always carry W3C Trace Context, whatever propagator the process registered for other carriers. */
const w3c = new W3CTraceContextPropagator();

const headerGetter: TextMapGetter<IHeaders> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => {
    const v = carrier[key];
    if (v === undefined) return undefined;
    return Array.isArray(v) ? v.map((x) => x.toString()) : v.toString();
  },
};
const headerSetter: TextMapSetter<IHeaders> = {
  set: (carrier, key, value) => {
    carrier[key] = value;
  },
};

/**
 * The context a consumed record continues: the trace context of its headers, else that of its event's metadata,
 * else none (a new trace starts; W3C Trace Context 3.2: a malformed traceparent is ignored). Extracted with the
 * SDK's W3C propagator.
 */
export function contextFromRecord(
  headers: IHeaders | undefined,
  metadata?: { traceparent?: string | null; tracestate?: string | null },
): Context {
  const fromHeaders = w3c.extract(ROOT_CONTEXT, headers ?? {}, headerGetter);
  if (trace.getSpanContext(fromHeaders)) return fromHeaders;
  if (!metadata?.traceparent) return ROOT_CONTEXT;
  const carrier: IHeaders = { traceparent: metadata.traceparent };
  if (metadata.tracestate) carrier.tracestate = metadata.tracestate;
  return w3c.extract(ROOT_CONTEXT, carrier, headerGetter);
}

/** `headers` (a new object) with the trace context of `ctx` (default: the active one) injected. */
export function headersWithTrace(headers: IHeaders = {}, ctx: Context = context.active()): IHeaders {
  const out: IHeaders = { ...headers };
  w3c.inject(ctx, out, headerSetter);
  return out;
}

/** The traceparent / tracestate of `ctx` (default: the active one), for an event's metadata; nulls without a span. */
export function traceContextOf(ctx: Context = context.active()): TraceContext {
  const carrier: IHeaders = {};
  w3c.inject(ctx, carrier, headerSetter);
  return {
    traceparent: carrier.traceparent?.toString() ?? null,
    tracestate: carrier.tracestate?.toString() ?? null,
  };
}

/** Kafka headers carrying `t` (W3C `traceparent`, and `tracestate` when set); undefined without a traceparent. */
export function traceHeaders(t: TraceContext | undefined): Record<string, string> | undefined {
  if (!t?.traceparent) return undefined;
  return { traceparent: t.traceparent, ...(t.tracestate ? { tracestate: t.tracestate } : {}) };
}

/** trace_id / span_id of the span of `ctx`, for log lines (OpenTelemetry's log correlation field names). */
export function traceIdsOf(ctx: Context): { trace_id?: string; span_id?: string } {
  const s = trace.getSpanContext(ctx);
  return s && isSpanContextValid(s) ? { trace_id: s.traceId, span_id: s.spanId } : {};
}

/** trace_id / span_id of the active span, for log lines (see {@link traceIdsOf}). */
export function activeTraceIds(): { trace_id?: string; span_id?: string } {
  return traceIdsOf(context.active());
}

/** What {@link startTracing} started. */
export interface Tracing {
  /** Spans are exported (an OTLP endpoint is set). */
  exporting: boolean;
  /**
   * The active context follows async calls (AsyncLocalStorage): code may read it (`context.active()`, log lines'
   * trace ids). When false, a caller passes contexts explicitly and `context.with` only calls its function.
   */
  activeContext: boolean;
  /** Flushes what is queued (call it before the process exits). */
  shutdown: () => Promise<void>;
}

/** Whether the active context follows async calls in this process ({@link Tracing.activeContext}; false before startTracing). */
export const activeContextFollowsCalls = (): boolean => started?.activeContext ?? false;

let started: Tracing | undefined;

/** Longest a shutdown waits for the last spans to be exported, in ms. */
const SHUTDOWN_FLUSH_MS = 5_000;

/**
 * Starts OpenTelemetry tracing in this process (once; later calls return the first result, but a later call that
 * needs the active context installs it): a tracer provider whose resource names `service` (OTEL_SERVICE_NAME wins),
 * AsyncLocalStorage context, the W3C Trace Context propagator.
 * Spans are exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set
 * and OTEL_TRACES_EXPORTER is unset or `otlp` (the exporter reads those and OTEL_EXPORTER_OTLP_HEADERS from
 * process.env itself: OTel spec
 * "OTLP Exporter Configuration"), in batches (BatchSpanProcessor, OTEL_BSP_* settings). Without an exporter no tracer
 * provider is registered: spans are no-ops that pass their parent's context on, so a caller's trace still reaches
 * Kafka headers, metadata and log lines, and tracing costs nothing per task.
 * `shutdown` flushes what is queued (call it before the process exits).
 *
 * `opts.activeContext`: `always` (default) installs the AsyncLocalStorage context manager whether or not spans are
 * exported; `when-exporting` installs it only with an exporter. Without it there is no active context to read: the
 * caller passes contexts explicitly (the worker's executor does), and no promise hook runs (on Node 20,
 * AsyncLocalStorage runs one for every promise: about a fifth of the worker's CPU per task, BENCHMARKS.md).
 */
export function startTracing(
  service: string,
  env: NodeJS.ProcessEnv = process.env,
  opts: { activeContext?: 'always' | 'when-exporting' } = {},
): Tracing {
  if (started) {
    // One process may hold both services (an application embedding both modules): the one that needs the active
    // context gets it, whichever started first.
    if (!started.activeContext && (opts.activeContext ?? 'always') === 'always') {
      context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
      started.activeContext = true;
    }
    return started;
  }
  const exporter = env.OTEL_TRACES_EXPORTER?.trim() || 'otlp';
  const exporting =
    exporter === 'otlp' &&
    Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim());
  if (!exporting) {
    // No tracer provider: spans are no-ops that carry their parent's context, so an incoming trace still flows
    // through (headers, metadata, log lines) at no cost per task.
    const activeContext = (opts.activeContext ?? 'always') === 'always';
    if (activeContext) context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    propagation.setGlobalPropagator(w3c);
    started = { exporting, activeContext, shutdown: async () => undefined };
    return started;
  }
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': env.OTEL_SERVICE_NAME?.trim() || service }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  provider.register({ propagator: w3c });
  // The SDK's own warnings (an export the collector refused or did not answer) go to stderr instead of nowhere.
  diag.setLogger(new DiagConsoleLogger(), DiagLogLevel.WARN);
  started = {
    exporting,
    activeContext: true, // provider.register installs the AsyncLocalStorage context manager
    // A collector that is down must not make a clean shutdown fail or hang: the last flush gets 5 s, then is dropped.
    shutdown: () =>
      Promise.race([
        provider.shutdown(),
        new Promise<void>((r) => setTimeout(r, SHUTDOWN_FLUSH_MS).unref()),
      ]).catch((e) => diag.warn(`spans not flushed at shutdown: ${(e as Error)?.message ?? String(e)}`)),
  };
  return started;
}

/** Default of OTEL_SPAN_LINK_COUNT_LIMIT (OTel spec "Span Limits"). */
const DEFAULT_SPAN_LINK_COUNT_LIMIT = 128;

/**
 * How many links a span of the SDK's tracer provider (the one {@link startTracing} registers, which sets no span
 * limits of its own) keeps: OTEL_SPAN_LINK_COUNT_LIMIT, read as the SDK reads it (OTel spec "Span Limits";
 * @opentelemetry/core `getNumberFromEnv`: unset, blank or not a number gives 128) and applied as its `addLink` applies
 * it: 0 keeps none, a negative value keeps one, a fraction is rounded up, `Infinity` keeps all.
 */
export function spanLinkLimit(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.OTEL_SPAN_LINK_COUNT_LIMIT?.trim();
  const n = raw ? Number(raw) : NaN;
  if (Number.isNaN(n)) return DEFAULT_SPAN_LINK_COUNT_LIMIT;
  return n === 0 ? 0 : n < 0 ? 1 : Math.ceil(n);
}

/** Attribute of a span given more links than it keeps: how many were left out (see {@link SpanLinks}). */
export const LINKS_DROPPED_ATTRIBUTE = 'keyflow.links_dropped';

/**
 * Links one span, started without links, to many span contexts (a batch span to the trace of each input it carries)
 * within the SDK's link limit ({@link spanLinkLimit}): the first `limit` are added, the rest are counted, and
 * {@link SpanLinks.close} writes the count as {@link LINKS_DROPPED_ATTRIBUTE}. Past its limit the SDK itself drops the
 * oldest link for each new one (so it would keep the last ones) and warns once per span ("Dropped N links because
 * linkCountLimit reached"), which for a batch of thousands of inputs is a warning per batch on stderr. On a no-op span
 * (no tracer provider) it costs a counter.
 */
export class SpanLinks {
  private added = 0;
  private dropped = 0;

  /** @param limit links to add at most (default: {@link spanLinkLimit} of process.env). */
  constructor(
    private readonly span: Span,
    private readonly limit: number = spanLinkLimit(),
  ) {}

  /** Adds a link to `context`, or counts it once the span holds `limit` links. */
  add(context: SpanContext): void {
    if (this.added < this.limit) {
      this.span.addLink({ context });
      this.added++;
    } else this.dropped++;
  }

  /** Writes how many links were left out on the span (nothing when none was); call before the span ends. */
  close(): void {
    if (this.dropped > 0) this.span.setAttribute(LINKS_DROPPED_ATTRIBUTE, this.dropped);
  }
}
