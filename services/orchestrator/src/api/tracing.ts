import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { noTracerProvider, tracer } from '@keyflow/observability';
import type { NextFunction, Request, Response } from 'express';

/** Paths polled by probes and scrapers: no span each (they would drown the traces of real requests). */
const UNTRACED = /^\/(health|metrics)(\/|$)/i;

/**
 * Express middleware: one SERVER span per API request (OTel HTTP semantic conventions: `http.request.method`,
 * `url.path`, `http.route`, `http.response.status_code`; status ERROR for 5xx), continuing the caller's
 * `traceparent` header (W3C Trace Context) when it has one. The handler runs inside the span, so what it publishes
 * (a StartRun, a signal) carries the span's context in its headers and metadata. Without a tracer provider (no
 * exporter: spans are no-ops) a request without `traceparent` gets no span and no context: nothing would carry one.
 */
export function httpSpans(req: Request, res: Response, next: NextFunction): void {
  if (UNTRACED.test(req.path)) return next();
  // No tracer provider and no caller's trace: the span would be a no-op of the invalid context, which is what the
  // handler sees without one (no traceparent in what it publishes, no trace ids in its log lines). Left out, so the
  // request is not bound to a context it does not need (binding wraps every listener of the request and response).
  if (req.headers.traceparent === undefined && noTracerProvider()) return next();
  const parent = propagation.extract(ROOT_CONTEXT, req.headers);
  const span = tracer().startSpan(
    `${req.method} ${req.path}`,
    { kind: SpanKind.SERVER, attributes: { 'http.request.method': req.method, 'url.path': req.path } },
    parent,
  );
  // 'close' comes after 'finish', and also when the client goes away before an answer: the span ends either way.
  res.once('close', () => {
    const route = (req.route as { path?: string } | undefined)?.path;
    if (route) {
      span.updateName(`${req.method} ${route}`);
      span.setAttribute('http.route', route);
    }
    if (res.writableFinished) {
      span.setAttribute('http.response.status_code', res.statusCode);
      if (res.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
    } else span.setStatus({ code: SpanStatusCode.ERROR, message: 'the client closed the connection first' });
    span.end();
  });
  // Bound to the request and response emitters too: a body read later (events fired from the socket) and the
  // handler it reaches stay in the span (as OpenTelemetry's own HTTP instrumentation does).
  const ctx = trace.setSpan(parent, span);
  context.bind(ctx, req);
  context.bind(ctx, res);
  context.with(ctx, next);
}
