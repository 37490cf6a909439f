import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser } from 'playwright-core';
import { request } from 'undici';
import { Webhook } from 'standardwebhooks';
import { ensureDebianTool, eventually } from '@keyflow/testing';
import { OrchestratorHarness, post, TEST_WEBHOOK_SECRET } from './support';

jest.setTimeout(300_000);

/** A name the deployment's proxy forwards as its Host (KEYFLOW_API_ALLOWED_HOSTS). */
const PROXY_HOST = 'orchestrator.internal.test';
/** The name a DNS-rebinding page's origin has; Chromium resolves it to 127.0.0.1 (--host-resolver-rules). */
const REBOUND = 'rebound.test';

interface RunView {
  status: string;
  output?: unknown;
  input?: unknown;
}

/**
 * An orchestrator without API keys (loopback only) must not be driven by a web page of another origin: the browser
 * sends a form post, a no-cors fetch or a request under a rebound DNS name, and none of them may start, cancel or
 * signal a run, or read one.
 */
describe('an API without keys refuses cross-site requests (forms, no-cors fetches, DNS rebinding)', () => {
  const h = new OrchestratorHarness('cross-site');
  let url: string;
  let port: number;
  let attacker: Server;
  let attackerUrl: string;
  let browser: Browser | undefined;

  beforeAll(async () => {
    const orch = await h.startOrchestrator({ KEYFLOW_API_ALLOWED_HOSTS: PROXY_HOST });
    url = await orch.ready;
    port = Number(new URL(url).port);
    attacker = createServer((req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(attackerPage(url, new URL(req.url ?? '/', 'http://x').searchParams));
    });
    await new Promise<void>((resolve) => attacker.listen(0, '127.0.0.1', resolve));
    attackerUrl = `http://127.0.0.1:${(attacker.address() as AddressInfo).port}`;
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
    await new Promise((resolve) => attacker?.close(resolve));
    await h.teardown();
  }, 60_000);

  const view = async (runId: string) => {
    const r = await fetch(`${url}/runs/${runId}`);
    return r.status === 200 ? ((await r.json()) as RunView) : undefined;
  };
  /** An approval run started the legitimate way, visible and waiting for its `approved` signal. */
  const waitingRun = async () => {
    const start = await post(`${url}/runs`, { workflow: 'approval', input: {} });
    expect(start.status).toBe(202);
    const runId = start.body.runId as string;
    await eventually('run waiting', async () =>
      (await view(runId))?.status === 'waiting' ? true : undefined,
    );
    return runId;
  };
  /**
   * Approves `runId` the legitimate way and awaits its end: a cancel or signal an attack had sent before would have
   * reached the run first (same run, same partition), so the run ends completed with our payload only if none did.
   */
  const approveAndEnd = async (runId: string, by: string) => {
    expect((await post(`${url}/runs/${runId}/signal`, { signal: 'approved', payload: { by } })).status).toBe(
      202,
    );
    return eventually('run ended', async () => {
      const v = await view(runId);
      return v && ['completed', 'cancelled', 'failed', 'compensated'].includes(v.status) ? v : undefined;
    });
  };
  /**
   * Starts `runId` the legitimate way with `input`: when an attack started it before, the engine keeps the first
   * start, and the run's input shows it.
   */
  const startedOnlyByUs = async (runId: string) => {
    expect((await post(`${url}/runs`, { workflow: 'approval', runId, input: { by: 'test' } })).status).toBe(
      202,
    );
    const v = await eventually('run visible', () => view(runId));
    return JSON.stringify(v?.input ?? {});
  };

  const raw = (path: string, o: { method?: string; headers?: Record<string, string>; body?: string } = {}) =>
    request(`${url}${path}`, { method: (o.method ?? 'GET') as 'GET', headers: o.headers, body: o.body }).then(
      async (r) => ({
        status: r.statusCode,
        body: (await r.body.json().catch(() => ({}))) as { code?: string },
      }),
    );

  it('raw HTTP: a form post, an Origin of another site, a foreign Host are refused with their codes; nothing starts, cancels or signals', async () => {
    const [a, b] = [await waitingRun(), await waitingRun()];
    const evil = { origin: 'https://evil.example' };
    const formStart = await raw('/runs', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: `workflow=approval&runId=${h.ns.prefix}-form`,
    });
    expect([formStart.status, formStart.body.code]).toEqual([415, 'UNSUPPORTED_MEDIA_TYPE']);
    const crossStart = await raw('/runs', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...evil },
      body: JSON.stringify({ workflow: 'approval', runId: `${h.ns.prefix}-cross`, input: { by: 'evil' } }),
    });
    expect([crossStart.status, crossStart.body.code]).toEqual([403, 'CROSS_ORIGIN_REFUSED']);
    const cancel = await raw(`/runs/${a}/cancel`, { method: 'POST', headers: evil });
    expect([cancel.status, cancel.body.code]).toEqual([403, 'CROSS_ORIGIN_REFUSED']);
    const signal = await raw(`/runs/${b}/signal`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...evil },
      body: 'signal=approved&payload=evil',
    });
    expect(signal.status).toBe(403);
    for (const path of ['/runs', `/runs/${a}`, '/health', '/console/', '/docs/openapi.json', '/ops/meta']) {
      const r = await raw(path, { headers: { host: 'evil.example' } });
      expect([path, r.status, r.body.code ?? null]).toEqual([path, 421, 'HOST_NOT_ALLOWED']);
    }
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, PROXY_HOST, `${PROXY_HOST}:8443`])
      expect([host, (await raw('/runs', { headers: { host } })).status]).toEqual([host, 200]);
    // The API's own origin (the console) passes.
    const own = await raw('/runs', { headers: { origin: url, 'sec-fetch-site': 'same-origin' } });
    expect(own.status).toBe(200);

    expect(await approveAndEnd(a, 'test')).toMatchObject({ status: 'completed' });
    const bEnd = await approveAndEnd(b, 'test');
    expect(bEnd?.status).toBe('completed');
    expect(JSON.stringify(bEnd)).not.toContain('evil');
    expect(await startedOnlyByUs(`${h.ns.prefix}-form`)).toBe('{"by":"test"}');
    expect(await startedOnlyByUs(`${h.ns.prefix}-cross`)).toBe('{"by":"test"}');
  });

  it('a signed webhook delivery is exempt from the Origin rule (its signature authenticates it); an unsigned one is not let in', async () => {
    const payload = JSON.stringify({ workflow: 'three-step' });
    const id = `${h.ns.prefix}-hook`;
    const now = new Date();
    const headers = {
      'content-type': 'application/json',
      origin: 'https://sender.example',
      'webhook-id': id,
      'webhook-timestamp': `${Math.floor(now.getTime() / 1000)}`,
      'webhook-signature': new Webhook(TEST_WEBHOOK_SECRET).sign(id, now, payload),
    };
    expect((await raw('/webhooks/three-step', { method: 'POST', headers, body: payload })).status).toBe(202);
    const unsigned = await raw('/webhooks/three-step', {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: 'https://evil.example' },
      body: payload,
    });
    expect(unsigned.status).toBe(401);
    const foreignHost = await raw('/webhooks/three-step', {
      method: 'POST',
      headers: { ...headers, host: 'evil.example' },
      body: payload,
    });
    expect(foreignHost.status).toBe(421);
  });

  it('headless Chromium: a page of another origin posts a form, sends no-cors fetches and reads /runs; a rebound DNS name reads /runs: nothing takes effect', async () => {
    const [a, b] = [await waitingRun(), await waitingRun()];
    const formRun = `${h.ns.prefix}-browser-form`;
    browser = await chromium.launch({
      executablePath: await ensureDebianTool('chromium', 'chromium'),
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        `--host-resolver-rules=MAP ${REBOUND} 127.0.0.1`,
      ],
    });
    const page = await browser.newPage();

    // 1. A form post to start a run (a top-level navigation to the API).
    await page.goto(`${attackerUrl}/?form=${encodeURIComponent(formRun)}`);
    const [formAnswer] = await Promise.all([
      page.waitForResponse((r) => r.url() === `${url}/runs`),
      page.click('#go'),
    ]);
    expect(formAnswer.status()).not.toBe(202);

    // 2. no-cors fetches to cancel one run and signal another, and a read of /runs.
    await page.goto(`${attackerUrl}/`);
    const result = await page.evaluate(
      async ({ api, a, b }) => {
        const settle = (p: Promise<unknown>) =>
          p.then(() => 'sent').catch((e: Error) => `error: ${e.message}`);
        const cancel = await settle(fetch(`${api}/runs/${a}/cancel`, { method: 'POST', mode: 'no-cors' }));
        const signal = await settle(
          fetch(`${api}/runs/${b}/signal`, {
            method: 'POST',
            mode: 'no-cors',
            body: new URLSearchParams({ signal: 'approved', payload: 'evil' }),
          }),
        );
        const signalText = await settle(
          fetch(`${api}/runs/${b}/signal`, {
            method: 'POST',
            mode: 'no-cors',
            body: JSON.stringify({ signal: 'approved', payload: 'evil' }),
          }),
        );
        let read: string;
        try {
          read = `read ${(await (await fetch(`${api}/runs`)).text()).length} characters`;
        } catch (e) {
          read = `error: ${(e as Error).message}`;
        }
        return { cancel, signal, signalText, read };
      },
      { api: url, a, b },
    );
    expect(result.read).toMatch(/^error/);

    // 3. DNS rebinding: the attacker's page has the origin rebound.test:<the API's port>, its name now resolving to
    // 127.0.0.1. Loading a document of that origin from this machine (Chromium blocks a public page's requests to
    // loopback; other browsers do not) reaches the API under the rebound name, and the document reads /runs same-origin.
    const rebound = `http://${REBOUND}:${port}`;
    const landing = await page.goto(`${rebound}/attack.html`);
    expect(landing?.status()).toBe(421);
    const rebind = await page.evaluate(async () => {
      const r = await fetch('/runs');
      return { status: r.status, text: (await r.text()).slice(0, 200) };
    });
    expect(rebind.status).toBe(421);
    expect(rebind.text).not.toContain('runId');

    // None took effect: the runs end as our own legitimate requests make them, the form's run is ours.
    expect(await approveAndEnd(a, 'test')).toMatchObject({ status: 'completed' });
    const bEnd = await approveAndEnd(b, 'test');
    expect(bEnd?.status).toBe('completed');
    expect(JSON.stringify(bEnd)).not.toContain('evil');
    expect(await startedOnlyByUs(formRun)).toBe('{"by":"test"}');
  });
});

/** The attacker's page: with `form`, a form that posts a start of that run id to the API when #go is clicked. */
function attackerPage(api: string, q: URLSearchParams): string {
  const runId = q.get('form');
  return `<!doctype html><title>evil</title>${
    runId
      ? `<form method="post" action="${api}/runs"><input name="workflow" value="approval">` +
        `<input name="runId" value="${runId}"><input name="input[by]" value="evil">` +
        `<button id="go" type="submit">go</button></form>`
      : ''
  }`;
}
