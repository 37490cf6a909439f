import { context, ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { activeContextFollowsCalls, contextFromRecord, startTracing, tracer } from '../../src';

const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

/** The span context active inside an awaited continuation of `context.with(ctx)`. */
async function activeAfterAwait(): Promise<string | undefined> {
  const span = tracer().startSpan('s', {}, contextFromRecord({ traceparent: tp }));
  return context.with(trace.setSpan(ROOT_CONTEXT, span), async () => {
    await new Promise((r) => setImmediate(r));
    return trace.getSpanContext(context.active())?.traceId;
  });
}

describe('the active context (AsyncLocalStorage) in a process without a trace exporter', () => {
  it('is left out when the first caller asks for it only when exporting, and installed once another needs it', async () => {
    const worker = startTracing('worker', {}, { activeContext: 'when-exporting' });
    expect(worker.exporting).toBe(false);
    expect(activeContextFollowsCalls()).toBe(false);
    expect(await activeAfterAwait()).toBeUndefined();

    const orchestrator = startTracing('orchestrator', {});
    expect(orchestrator.activeContext).toBe(true);
    expect(activeContextFollowsCalls()).toBe(true);
    expect(await activeAfterAwait()).toBe('0af7651916cd43dd8448eb211c80319c');
  });
});
