import { randomFillSync } from 'node:crypto';
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

// Random ids come from a pool refilled 4 KiB at a time: one randomFillSync per 512 span ids, not one per id (the
// worker makes a span id per task; a syscall each showed in its CPU profile).
const POOL = Buffer.alloc(4096);
let poolAt = POOL.length;

/** `bytes` random bytes as lowercase hex, never all zero (W3C Trace Context 3.2.2.3: all-zero ids are invalid). */
function randomHex(bytes: number): string {
  for (;;) {
    if (poolAt + bytes > POOL.length) {
      randomFillSync(POOL);
      poolAt = 0;
    }
    const hex = POOL.toString('hex', poolAt, poolAt + bytes);
    poolAt += bytes;
    if (!/^0+$/.test(hex)) return hex;
  }
}

/** A child context: same trace id, a new span id (or a new trace when `parent` is absent or invalid). */
export function childTraceContext(parent?: TraceContext | null): TraceContext {
  const p = parseTraceparent(parent?.traceparent);
  const traceId = p?.traceId ?? randomHex(16);
  return {
    traceparent: `00-${traceId}-${randomHex(8)}-${p?.flags ?? '01'}`,
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
