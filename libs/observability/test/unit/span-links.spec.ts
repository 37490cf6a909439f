import { diag, DiagLogLevel, trace, type DiagLogger } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-node';
import { LINKS_DROPPED_ATTRIBUTE, SpanLinks, spanLinkLimit } from '../../src';

/** A span context of its own trace (as an input record of another run would carry). */
const other = (i: number) => ({
  traceId: (i + 1).toString(16).padStart(32, '0'),
  spanId: (i + 1).toString(16).padStart(16, '0'),
  traceFlags: 1,
});

describe('SpanLinks: a batch span links to its inputs within the SDK span limits', () => {
  const exporter = new InMemorySpanExporter();
  const warnings: string[] = [];
  const logger: DiagLogger = {
    error: (m) => warnings.push(m),
    warn: (m) => warnings.push(m),
    info: () => undefined,
    debug: () => undefined,
    verbose: () => undefined,
  };
  beforeAll(() => diag.setLogger(logger, DiagLogLevel.WARN));
  afterAll(() => diag.disable());
  beforeEach(() => {
    exporter.reset();
    warnings.length = 0;
  });

  it.each(['', ' ', '7', '0', '-1', '1.5', 'Infinity', 'many', '300'])(
    'the limit is what the SDK keeps with OTEL_SPAN_LINK_COUNT_LIMIT=%p (OTel spec "Span Limits")',
    (value) => {
      const saved = process.env.OTEL_SPAN_LINK_COUNT_LIMIT;
      process.env.OTEL_SPAN_LINK_COUNT_LIMIT = value;
      try {
        // The SDK reads the variable when its provider is made, and keeps what its addLink keeps.
        const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
        const span = provider.getTracer('test').startSpan('batch');
        for (let i = 0; i < 200; i++) span.addLink({ context: other(i) });
        span.end();
        const kept = exporter.getFinishedSpans()[0].links.length;
        expect(Math.min(200, spanLinkLimit({ OTEL_SPAN_LINK_COUNT_LIMIT: value }))).toBe(kept);
      } finally {
        if (saved === undefined) delete process.env.OTEL_SPAN_LINK_COUNT_LIMIT;
        else process.env.OTEL_SPAN_LINK_COUNT_LIMIT = saved;
      }
    },
  );

  it('a batch of more inputs than the limit keeps the first links, counts the rest, and the SDK warns nothing', () => {
    const provider = new BasicTracerProvider({
      spanLimits: { linkCountLimit: 5 },
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    });
    const span = provider.getTracer('test').startSpan('batch');
    const links = new SpanLinks(span, 5);
    for (let i = 0; i < 12; i++) links.add(other(i));
    links.close();
    span.end();
    const [done] = exporter.getFinishedSpans();
    expect(done.links.map((l) => l.context.traceId)).toEqual([0, 1, 2, 3, 4].map((i) => other(i).traceId));
    expect(done.attributes[LINKS_DROPPED_ATTRIBUTE]).toBe(7);
    expect(warnings).toEqual([]);
  });

  it('within the limit every input is linked and no count is written', () => {
    const provider = new BasicTracerProvider({
      spanLimits: { linkCountLimit: 128 },
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    });
    const span = provider.getTracer('test').startSpan('batch');
    const links = new SpanLinks(span, 128);
    for (let i = 0; i < 128; i++) links.add(other(i));
    links.close();
    span.end();
    const [done] = exporter.getFinishedSpans();
    expect(done.links).toHaveLength(128);
    expect(done.attributes).not.toHaveProperty(LINKS_DROPPED_ATTRIBUTE);
    expect(warnings).toEqual([]);
  });

  it('on a no-op span (no tracer provider) it does nothing', () => {
    const span = trace.getTracer('none').startSpan('batch');
    const links = new SpanLinks(span, 1);
    links.add(other(0));
    links.add(other(1));
    expect(() => links.close()).not.toThrow();
  });
});
