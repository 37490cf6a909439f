import { childTraceContext, parseTraceparent, traceFromHeaders, traceToHeaders } from '../../src';

const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

describe('trace context in Kafka headers', () => {
  it('a child keeps the trace id and the flags, with a new span id', () => {
    const child = childTraceContext({ traceparent: tp, tracestate: 'k=v' });
    const p = parseTraceparent(child.traceparent)!;
    expect(p.traceId).toBe('0af7651916cd43dd8448eb211c80319c');
    expect(p.parentId).not.toBe('b7ad6b7169203331');
    expect(p.flags).toBe('01');
    expect(child.tracestate).toBe('k=v');
  });

  it('an invalid or all-zero parent starts a new trace (W3C trace context, section 3.2)', () => {
    expect(parseTraceparent('00-00000000000000000000000000000000-b7ad6b7169203331-01')).toBeUndefined();
    expect(parseTraceparent('garbage')).toBeUndefined();
    const fresh = childTraceContext({ traceparent: 'garbage' });
    expect(parseTraceparent(fresh.traceparent)).toBeDefined();
  });

  it('round-trips through headers, keeping other headers', () => {
    const headers = traceToHeaders({ traceparent: tp, tracestate: 'a=b' }, { other: 'x' });
    expect(headers.other).toBe('x');
    expect(traceFromHeaders({ ...headers, traceparent: Buffer.from(tp) })).toEqual({
      traceparent: tp,
      tracestate: 'a=b',
    });
    expect(traceFromHeaders({})).toBeUndefined();
  });
});
