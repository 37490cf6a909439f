import { trace } from '@opentelemetry/api';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { contextFromRecord, noTracerProvider, traceContextOf, tracer } from '../../src';

const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

describe('noTracerProvider: when a span may be left out for its parent context', () => {
  afterAll(() => trace.disable());

  it("without a provider a child span carries its parent's trace context, so the parent context stands in for it", () => {
    expect(noTracerProvider()).toBe(true);
    for (const parent of [contextFromRecord({ traceparent: tp, tracestate: 'k=v' }), contextFromRecord({})]) {
      const child = tracer().startSpan('child', {}, parent);
      expect(child.isRecording()).toBe(false);
      expect(traceContextOf(trace.setSpan(parent, child))).toEqual(traceContextOf(parent));
    }
    expect(traceContextOf(contextFromRecord({ traceparent: tp })).traceparent).toBe(tp);
  });

  it('once any provider is registered, spans are made again', () => {
    const provider = new NodeTracerProvider();
    provider.register();
    try {
      expect(noTracerProvider()).toBe(false);
      const parent = contextFromRecord({ traceparent: tp });
      const child = tracer().startSpan('child', {}, parent);
      // A real child: same trace, its own span id, which the parent context alone would not carry.
      expect(traceContextOf(trace.setSpan(parent, child)).traceparent).not.toBe(tp);
      child.end();
    } finally {
      void provider.shutdown();
    }
  });
});
