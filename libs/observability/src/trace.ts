import { randomBytes } from 'node:crypto';
import type { IHeaders } from 'kafkajs';

/**
 * W3C Trace Context (https://www.w3.org/TR/trace-context/) in Kafka record headers `traceparent` and `tracestate`,
 * the same header names OpenTelemetry's Kafka instrumentations use, so spans join across services.
 * traceparent = `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`.
 */
export interface TraceContext {
  traceparent: string;
  tracestate?: string | null;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** Parses a traceparent; `undefined` when absent or malformed (spec section 3.2: then start a new trace). */
export function parseTraceparent(
  value: string | null | undefined,
): { traceId: string; parentId: string; flags: string } | undefined {
  const m = value ? TRACEPARENT.exec(value) : null;
  if (!m || /^0+$/.test(m[1]) || /^0+$/.test(m[2])) return undefined;
  return { traceId: m[1], parentId: m[2], flags: m[3] };
}

/** A child context: same trace id, a new span id (or a new trace when `parent` is absent or invalid). */
export function childTraceContext(parent?: TraceContext | null): TraceContext {
  const p = parseTraceparent(parent?.traceparent);
  const traceId = p?.traceId ?? randomBytes(16).toString('hex');
  return {
    traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-${p?.flags ?? '01'}`,
    tracestate: p ? (parent?.tracestate ?? null) : null,
  };
}

/** Reads the trace context from Kafka headers. */
export function traceFromHeaders(headers: IHeaders | undefined): TraceContext | undefined {
  const tp = headers?.traceparent?.toString();
  if (!parseTraceparent(tp)) return undefined;
  return { traceparent: tp!, tracestate: headers?.tracestate?.toString() ?? null };
}

/** Writes the trace context into Kafka headers (returns a new object). */
export function traceToHeaders(ctx: TraceContext, headers: IHeaders = {}): IHeaders {
  return {
    ...headers,
    traceparent: ctx.traceparent,
    ...(ctx.tracestate ? { tracestate: ctx.tracestate } : {}),
  };
}
