import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { eventually } from '@keyflow/testing';
import { OrchestratorHarness, TERMINAL_EVENTS, post } from './support';

jest.setTimeout(120_000);

/** A span as the OTLP/HTTP JSON encoding carries it (ids as hex; OTLP spec "JSON Protobuf Encoding"). */
interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  links: Array<{ traceId: string; spanId: string }>;
}

/** An id as the exporter wrote it: hex, or base64 of the bytes (both are seen in OTLP/JSON producers). */
const hexId = (id: string | undefined): string | undefined =>
  !id ? undefined : /^[0-9a-f]+$/i.test(id) ? id.toLowerCase() : Buffer.from(id, 'base64').toString('hex');

/** An OTLP/HTTP receiver (POST /v1/traces, JSON), as a collector would be: it keeps every span it is sent. */
async function otlpReceiver(): Promise<{ url: string; spans: ReceivedSpan[]; server: Server }> {
  const spans: ReceivedSpan[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      if (req.url === '/v1/traces' && req.headers['content-type']?.includes('json')) {
        const doc = JSON.parse(body) as {
          resourceSpans: Array<{
            resource: { attributes: Array<{ key: string; value: { stringValue?: string } }> };
            scopeSpans: Array<{ spans: Array<Record<string, unknown>> }>;
          }>;
        };
        for (const rs of doc.resourceSpans) {
          const service =
            rs.resource.attributes.find((a) => a.key === 'service.name')?.value.stringValue ?? '';
          for (const ss of rs.scopeSpans)
            for (const s of ss.spans)
              spans.push({
                service,
                traceId: hexId(s.traceId as string)!,
                spanId: hexId(s.spanId as string)!,
                parentSpanId: hexId(s.parentSpanId as string | undefined),
                name: s.name as string,
                kind: s.kind as number,
                links: ((s.links as Array<{ traceId: string; spanId: string }> | undefined) ?? []).map(
                  (l) => ({
                    traceId: hexId(l.traceId)!,
                    spanId: hexId(l.spanId)!,
                  }),
                ),
              });
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } else res.writeHead(404).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, server };
}

describe('tracing (OpenTelemetry, OTLP/HTTP)', () => {
  it("what a run's durable timers fire (step timeouts, retries after backoff) stays in the run's trace", async () => {
    const receiver = await otlpReceiver();
    const h = new OrchestratorHarness('tracing-timers');
    try {
      const orch = await h.startOrchestrator({
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_BSP_SCHEDULE_DELAY: '200',
      });
      await h.readEvents();
      await h.simulateWorker(['slow.prepare', 'slow.undo'], () => ({ output: 'ok' }));
      await h.simulateWorker(['slow.never'], () => undefined); // never answers: each attempt times out
      const traceId = randomBytes(16).toString('hex');
      const started = await post(
        `${await orch.ready}/runs`,
        { workflow: 'slowpoke', input: {} },
        { traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` },
      );
      const runId = started.body.runId as string;
      await eventually(
        'the run is compensated',
        () => h.of(runId).find((e) => e.event === 'RunCompensated'),
        {
          timeoutMs: 60_000,
        },
      );
      const spans = await eventually(
        'the timers are applied in the trace',
        () => receiver.spans.filter((s) => s.traceId === traceId),
        {
          until: (ss) => ss.filter((s) => s.name === 'keyflow.engine.apply TimerFired').length >= 3,
          timeoutMs: 30_000,
        },
      );
      const ids = new Set(spans.map((s) => s.spanId));
      const timerApplies = spans.filter((s) => s.name === 'keyflow.engine.apply TimerFired');
      expect(timerApplies.filter((s) => !ids.has(s.parentSpanId ?? ''))).toEqual([]);
    } finally {
      await h.teardown();
      receiver.server.close();
    }
  });

  it('one run yields one connected trace across the API, the engine and the worker', async () => {
    const receiver = await otlpReceiver();
    const h = new OrchestratorHarness('tracing');
    try {
      const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '200' };
      const orch = await h.startOrchestrator(otel);
      await h.startWorker(otel);
      await h.readEvents();
      // The caller's own span: the run's trace continues it.
      const traceId = randomBytes(16).toString('hex');
      const rootSpanId = randomBytes(8).toString('hex');
      const started = await post(
        `${await orch.ready}/runs`,
        { workflow: 'three-step', input: { n: 1 } },
        { traceparent: `00-${traceId}-${rootSpanId}-01` },
      );
      expect(started.status).toBe(202);
      const runId = started.body.runId as string;
      await eventually(
        'the run ends',
        () => h.events.items.find((e) => e.value.runId === runId && TERMINAL_EVENTS.has(e.event)),
        { until: (e) => e?.event === 'RunCompleted', timeoutMs: 60_000 },
      );
      // Expected in the trace: the request, the engine's four applied inputs (the start, three results), and per
      // step the worker's task, attempt and handler spans.
      const inTrace = () => receiver.spans.filter((s) => s.traceId === traceId);
      const spans = await eventually('the spans of the run are exported', inTrace, {
        until: (ss) =>
          ss.filter((s) => s.name.startsWith('keyflow.engine.apply')).length >= 4 &&
          ss.filter((s) => s.name === 'keyflow.task echo').length >= 3 &&
          ss.filter((s) => s.name === 'keyflow.handler echo').length >= 3 &&
          ss.some((s) => s.name === 'POST /runs'),
        timeoutMs: 30_000,
      });

      const api = spans.find((s) => s.name === 'POST /runs')!;
      expect(api).toMatchObject({ service: 'keyflow-orchestrator', parentSpanId: rootSpanId, kind: 2 }); // SERVER
      expect(new Set(spans.map((s) => s.service))).toEqual(
        new Set(['keyflow-orchestrator', 'keyflow-worker']),
      );
      expect(spans.filter((s) => s.name === 'keyflow.task.attempt')).toHaveLength(3);
      // Connected: every span's parent is a span of the trace, except the request's, whose parent is the caller.
      const ids = new Set(spans.map((s) => s.spanId));
      const orphans = spans.filter((s) => s !== api && !ids.has(s.parentSpanId ?? ''));
      expect(orphans.map((s) => `${s.service} ${s.name} (parent ${s.parentSpanId})`)).toEqual([]);
      // The chain runs API -> engine -> worker -> engine: the first task's span is a child of the start's apply span,
      // whose parent is the request; a later apply span is a child of a task span.
      const byId = new Map(spans.map((s) => [s.spanId, s]));
      const startApply = spans.find((s) => s.name === 'keyflow.engine.apply StartRun')!;
      expect(startApply.parentSpanId).toBe(api.spanId);
      const tasks = spans.filter((s) => s.name === 'keyflow.task echo');
      expect(tasks.map((t) => byId.get(t.parentSpanId!)!.name.startsWith('keyflow.engine.apply'))).toEqual([
        true,
        true,
        true,
      ]);
      const resultApplies = spans.filter((s) => s.name === 'keyflow.engine.apply TaskCompleted');
      expect(resultApplies.map((s) => byId.get(s.parentSpanId!)!.name)).toEqual(
        Array(3).fill('keyflow.task echo'),
      );
      // The engine's batch spans (their own traces) link to the run's spans they carried.
      const batchLinks = receiver.spans
        .filter((s) => s.name === 'keyflow.engine.batch')
        .flatMap((s) => s.links)
        .filter((l) => l.traceId === traceId);
      expect(batchLinks.length).toBeGreaterThanOrEqual(4);
    } finally {
      await h.teardown();
      receiver.server.close();
    }
  });
});
