import { ROOT_CONTEXT, trace, context } from '@opentelemetry/api';
import { contextFromRecord, headersWithTrace, startTracing, traceContextOf, tracer } from '../../src';
import { createLogger } from '../../src/logger';

const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

describe('trace context in Kafka records (W3C Trace Context, the SDK propagator)', () => {
  beforeAll(() => startTracing('trace-test', {}));

  it('a record continues the trace of its headers, else of its metadata, else none', () => {
    const fromHeaders = contextFromRecord({ traceparent: Buffer.from(tp), tracestate: 'k=v' });
    expect(trace.getSpanContext(fromHeaders)).toMatchObject({
      traceId: '0af7651916cd43dd8448eb211c80319c',
      spanId: 'b7ad6b7169203331',
      isRemote: true,
    });
    expect(trace.getSpanContext(fromHeaders)?.traceState?.get('k')).toBe('v');
    const fromMetadata = contextFromRecord({}, { traceparent: tp, tracestate: null });
    expect(trace.getSpanContext(fromMetadata)?.traceId).toBe('0af7651916cd43dd8448eb211c80319c');
    // Malformed or all-zero ids start a new trace (W3C Trace Context 3.2.2.3).
    expect(trace.getSpanContext(contextFromRecord({ traceparent: 'garbage' }))).toBeUndefined();
    expect(
      trace.getSpanContext(
        contextFromRecord({}, { traceparent: '00-00000000000000000000000000000000-b7ad6b7169203331-01' }),
      ),
    ).toBeUndefined();
  });

  it("a span's context is injected into headers and metadata as its child: same trace, the span's own id", () => {
    const parent = contextFromRecord({ traceparent: tp });
    const span = tracer().startSpan('child', {}, parent);
    const ctx = trace.setSpan(parent, span);
    const headers = headersWithTrace({ other: 'x' }, ctx);
    expect(headers.other).toBe('x');
    expect(headers.traceparent).toBe(`00-0af7651916cd43dd8448eb211c80319c-${span.spanContext().spanId}-01`);
    expect(traceContextOf(ctx).traceparent).toBe(headers.traceparent);
    expect(traceContextOf(ROOT_CONTEXT)).toEqual({ traceparent: null, tracestate: null });
    span.end();
  });

  it('a log line written inside a span carries its trace_id and span_id', () => {
    const lines: string[] = [];
    const logger = createLogger('t');
    const write = jest
      .spyOn(process.stdout, 'write')
      .mockImplementation((chunk: string | Uint8Array) => (lines.push(String(chunk)), true));
    const span = tracer().startSpan('logged', {}, contextFromRecord({ traceparent: tp }));
    try {
      context.with(trace.setSpan(ROOT_CONTEXT, span), () => logger.info('inside'));
      logger.info('outside');
    } finally {
      write.mockRestore();
      span.end();
    }
    const [inside, outside] = lines.map((l) => JSON.parse(l));
    expect(inside).toMatchObject({
      trace_id: '0af7651916cd43dd8448eb211c80319c',
      span_id: span.spanContext().spanId,
    });
    expect(outside.trace_id).toBeUndefined();
  });
});
