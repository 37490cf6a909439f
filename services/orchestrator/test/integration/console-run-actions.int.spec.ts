import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page, Request } from 'playwright-core';
import { eventually } from '@keyflow/testing';
import { launchChromium, OrchestratorHarness, post, SCREENSHOTS_DIR } from './support';

jest.setTimeout(300_000);

const READER = 'reader-key-0123456789abcdefghij';
const OPERATOR = 'operator-key-0123456789abcdefghij';
const WRITER = 'writer-key-0123456789abcdefghij';
/** The run actions' buttons. */
const ACTIONS = ['cancel', 'terminate', 'signal', 'retry'] as const;
/** Where the screenshots go (one PNG per scenario). */
const SCREENSHOTS = join(SCREENSHOTS_DIR, 'console');
/** Longest wait for something the console shows live (a run's page refreshes every 2 s), ms. */
const LIVE_MS = 60_000;

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

/**
 * A run's page in the ops console acts on the run (cancel, terminate, signal, retry) in a real headless Chromium,
 * with API keys configured: each action is the run API's request, under the API's own scopes and cross-site rules.
 */
describe("the console's run actions (headless Chromium, API keys)", () => {
  const h = new OrchestratorHarness('console-actions');
  /** Runs whose charge failed once: the simulated worker fails a run's first charge and completes its second. */
  const declined = new Set<string>();
  let browser: Browser | undefined;
  let url: string;

  beforeAll(async () => {
    mkdirSync(SCREENSHOTS, { recursive: true });
    const orch = await h.startOrchestrator({
      KEYFLOW_API_KEYS: JSON.stringify([
        { name: 'dashboards', key: READER, scopes: ['read'] },
        { name: 'ops', key: OPERATOR, scopes: ['read', 'control'] },
        { name: 'scripts', key: WRITER, scopes: ['control'] },
      ]),
    });
    url = await orch.ready;
    await h.readEvents();
    await h.simulateWorker(['charge'], (cmd) => {
      if (declined.has(cmd.runId)) return { output: { charged: true } };
      declined.add(cmd.runId);
      return { error: 'card declined', retryable: false };
    });
    browser = await launchChromium();
  }, 900_000); // a fresh machine installs chromium first (apt-get)
  afterAll(async () => {
    await browser?.close();
    await h.teardown();
  });

  const start = async (workflow: string, input: Record<string, unknown> = {}) => {
    const r = await post(`${url}/runs`, { workflow, input }, bearer(OPERATOR));
    expect(r.status).toBe(202);
    return r.body.runId as string;
  };
  const status = async (runId: string) =>
    (
      (await (await fetch(`${url}/runs/${runId}`, { headers: bearer(OPERATOR) })).json()) as {
        status: string;
      }
    ).status;

  /** A fresh tab signed in with `key` on the page of `runId`, once it shows the run `waitFor` (a status). */
  async function openRun(key: string, runId: string, waitFor: string): Promise<Page> {
    const page = await browser!.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('dialog', (d) => void d.accept()); // cancel and terminate ask first
    await page.goto(`${url}/console/#/runs/${encodeURIComponent(runId)}`);
    await page.locator('[data-testid="sign-in"] input[name="key"]').fill(key);
    await page.locator('[data-testid="sign-in"] button[type="submit"]').click();
    await runStatus(page, waitFor);
    return page;
  }
  const runStatus = (page: Page, s: string) =>
    page
      .locator('[data-testid="run-status"] .v', { hasText: new RegExp(`^${s}$`) })
      .waitFor({ timeout: LIVE_MS });
  const answer = (page: Page, re: RegExp) =>
    page.locator('[data-testid="action-answer"]', { hasText: re }).waitFor({ timeout: LIVE_MS });
  const shot = (page: Page, name: string) =>
    page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
  /** The run requests the page sends: method, path and Idempotency-Key. */
  const runRequests = (page: Page) => {
    const sent: Array<{ path: string; key: string | undefined }> = [];
    page.on('request', (r: Request) => {
      const path = new URL(r.url()).pathname;
      if (r.method() === 'POST' && path.startsWith('/runs/'))
        sent.push({ path, key: r.headers()['idempotency-key'] });
    });
    return sent;
  };

  it('signals a waiting run from its page (payload checked as JSON first) and it completes; a double click signals once', async () => {
    const runId = await start('two-approvals');
    const page = await openRun(OPERATOR, runId, 'waiting');
    const sent = runRequests(page);
    // A key with the control scope: no button disabled for a scope, no note.
    expect(await page.locator('[data-testid="action-scope"]').isHidden()).toBe(true);
    for (const kind of ACTIONS)
      expect([kind, await page.locator(`[data-testid="run-${kind}"]`).getAttribute('title')]).toEqual([
        kind,
        null,
      ]);
    await page.locator('[data-testid="action-signal"]').fill('approved');
    await page.locator('[data-testid="action-payload"]').fill('{"by": console}');
    await page.locator('[data-testid="run-signal"]').click();
    await answer(page, /^signal: the payload is not JSON \(.+\); nothing sent$/);
    expect(sent).toEqual([]);

    await page.locator('[data-testid="action-payload"]').fill('{"by": "console"}');
    await page.locator('[data-testid="run-signal"]').dblclick();
    await answer(page, /^signal approved: accepted \(request [0-9a-f-]{36}\)$/);
    await page.locator('[data-testid="steps"] tr[data-step="first"] td[data-status="completed"]').waitFor({
      timeout: LIVE_MS,
    });
    // Two approvals in a row: a signal applied twice would have completed the run.
    expect(await status(runId)).toBe('waiting');
    expect(sent.length).toBeGreaterThanOrEqual(1);
    expect(new Set(sent.map((s) => `${s.path} ${s.key}`)).size).toBe(1);
    expect(sent[0].key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    await shot(page, 'run-signalled');

    // A new click is a new request (a new key): the second approval completes the run.
    await page.locator('[data-testid="run-signal"]').click();
    await runStatus(page, 'completed');
    expect(new Set(sent.map((s) => s.key)).size).toBe(2);
    expect(await page.locator('[data-testid="run-signal"]').isDisabled()).toBe(true);
    const signalled = h
      .of(runId)
      .filter((e) => e.event === 'StepCompleted')
      .map((e) => e.value.stepId);
    expect(signalled).toEqual(['first', 'second']);
    await page.close();
  });

  it('cancels a waiting run with its reason and terminates another, from their pages', async () => {
    const cancelled = await start('approval');
    const page = await openRun(OPERATOR, cancelled, 'waiting');
    const sent = runRequests(page);
    await page.locator('[data-testid="action-reason"]').fill('no longer needed <b>now</b>');
    // The first try is lost on the way (no answer): the next click sends the same request, with the same key.
    await page.route('**/runs/*/cancel', (r) => r.abort('connectionreset'));
    await page.locator('[data-testid="run-cancel"]').click();
    await answer(page, /^cancel: no answer \(.+\); a click sends the same request again, applied once$/);
    await page.unroute('**/runs/*/cancel');
    await page.locator('[data-testid="run-cancel"]').click();
    await answer(page, /^cancel: accepted \(request [0-9a-f-]{36}\)$/);
    expect(sent.length).toBe(2);
    expect(sent[1].key).toBe(sent[0].key);
    await runStatus(page, 'cancelled');
    await page
      .locator('[data-testid="timeline"] td', { hasText: 'RunCancelled' })
      .waitFor({ timeout: LIVE_MS });
    expect(await page.locator('[data-testid="run-cancel"]').isDisabled()).toBe(true);
    const event = await eventually(
      'RunCancelled',
      () => h.of(cancelled).find((e) => e.event === 'RunCancelled'),
      {
        timeoutMs: LIVE_MS,
      },
    );
    expect(event?.value).toMatchObject({ reason: 'no longer needed <b>now</b>', terminated: false });
    await shot(page, 'run-cancelled');

    const terminated = await start('approval');
    await page.goto(`${url}/console/#/runs/${terminated}`);
    await runStatus(page, 'waiting');
    await page.locator('[data-testid="run-terminate"]').click();
    await runStatus(page, 'cancelled');
    const stop = await eventually(
      'RunCancelled',
      () => h.of(terminated).find((e) => e.event === 'RunCancelled'),
      {
        timeoutMs: LIVE_MS,
      },
    );
    expect(stop?.value).toMatchObject({ reason: 'terminated from the keyflow console', terminated: true });
    await page.close();
  });

  it('retries a failed run from its page, and it completes', async () => {
    const runId = await start('payment-plain', { amount: 5 });
    const page = await openRun(OPERATOR, runId, 'failed');
    await page
      .locator('[data-testid="steps"] tr[data-step="charge"]', { hasText: 'card declined' })
      .waitFor();
    expect(await page.locator('[data-testid="run-cancel"]').isDisabled()).toBe(false); // a failed run may be cancelled
    await page.locator('[data-testid="run-retry"]').click();
    await answer(page, /^retry: accepted \(request [0-9a-f-]{36}\)$/);
    await runStatus(page, 'completed');
    const events = h.of(runId).map((e) => e.event);
    // The failed charge scheduled again (the retry), and this time it completes.
    expect(events.slice(events.indexOf('RunFailed'))).toEqual([
      'RunFailed',
      'StepScheduled',
      'StepCompleted',
      'RunCompleted',
    ]);
    expect(await page.locator('[data-testid="run-retry"]').isDisabled()).toBe(true);
    await shot(page, 'run-retried');
    await page.close();
  });

  it('GET /ops/me names each key and its scopes, never the key, whatever its scopes; 401 without a known key', async () => {
    const me = async (headers: Record<string, string>) => {
      const res = await fetch(`${url}/ops/me`, { headers });
      return { status: res.status, text: await res.text() };
    };
    for (const [key, name, scopes] of [
      [READER, 'dashboards', ['read']],
      [OPERATOR, 'ops', ['read', 'control']],
      [WRITER, 'scripts', ['control']], // a key that may not read still learns what it may do
    ] as const) {
      const r = await me(bearer(key));
      expect([name, r.status, JSON.parse(r.text)]).toEqual([
        name,
        200,
        { authentication: true, name, scopes },
      ]);
      expect(r.text).not.toContain(key);
    }
    expect((await me({ 'x-api-key': READER })).status).toBe(200);
    for (const headers of [{}, bearer('unknown-key-0123456789abcdefghij')]) {
      const r = await me(headers);
      expect([r.status, JSON.parse(r.text).code]).toEqual([401, 'UNAUTHENTICATED']);
    }
  });

  it("a read-only key sees the run's actions disabled, each naming the control scope it needs, and sends nothing", async () => {
    const runId = await start('payment-plain', { amount: 7 });
    const page = await openRun(READER, runId, 'failed'); // failed: by its status alone each action would be enabled
    const sent = runRequests(page);
    const why = 'needs the control scope: the API key dashboards has read';
    await page
      .locator('[data-testid="action-scope"]', { hasText: `Actions disabled: each ${why}.` })
      .waitFor({ timeout: LIVE_MS });
    for (const kind of ACTIONS) {
      const button = page.locator(`[data-testid="run-${kind}"]`);
      expect([kind, await button.isDisabled(), await button.getAttribute('title')]).toEqual([
        kind,
        true,
        why,
      ]);
    }
    await page.locator('[data-testid="run-retry"]').click({ force: true }); // a disabled button does nothing
    await shot(page, 'run-actions-read-only');
    expect(sent).toEqual([]);
    expect(await status(runId)).toBe('failed');
    await page.close();
  });

  it('a key that lost the control scope after the page asked is refused as by the API (403 FORBIDDEN naming the scope), the page says so, the buttons follow, and the run is untouched', async () => {
    const runId = await start('approval');
    const page = await browser!.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('dialog', (d) => void d.accept());
    // The page's first GET /ops/me with a key answers as if the key still had control (keys configured anew since).
    let stale = true;
    await page.route('**/ops/me', (r) => {
      if (!stale || !r.request().headers().authorization) return r.continue();
      stale = false;
      return r.fulfill({
        status: 200,
        contentType: 'application/json',
        body: JSON.stringify({ authentication: true, name: 'dashboards', scopes: ['read', 'control'] }),
      });
    });
    await page.goto(`${url}/console/#/runs/${encodeURIComponent(runId)}`);
    await page.locator('[data-testid="sign-in"] input[name="key"]').fill(READER);
    await page.locator('[data-testid="sign-in"] button[type="submit"]').click();
    await runStatus(page, 'waiting');
    const sent = runRequests(page);
    expect(await page.locator('[data-testid="run-cancel"]').isDisabled()).toBe(false);
    await page.locator('[data-testid="action-signal"]').fill('approved');
    await page.locator('[data-testid="run-signal"]').click();
    await answer(
      page,
      /^signal approved: refused: 403 FORBIDDEN the API key dashboards lacks the control scope$/,
    );
    // The 403 makes the page ask GET /ops/me again: the buttons now say why, and the refusal stays shown.
    await page.locator('[data-testid="run-cancel"][title^="needs the control scope"]:disabled').waitFor({
      timeout: LIVE_MS,
    });
    await answer(page, /^signal approved: refused: 403 FORBIDDEN/);
    await shot(page, 'run-action-refused');
    expect(sent.map((s) => s.path)).toEqual([`/runs/${runId}/signal`]);
    // The same request from outside a browser gets the same answer.
    const direct = await post(`${url}/runs/${runId}/cancel`, { reason: 'x' }, bearer(READER));
    expect([direct.status, direct.body.code, direct.body.scope]).toEqual([403, 'FORBIDDEN', 'control']);
    await runStatus(page, 'waiting'); // still signed in: a 403 on a control request does not sign the reader out
    expect(await status(runId)).toBe('waiting');
    expect(h.of(runId).map((e) => e.event)).not.toContain('RunCancelled');
    await page.close();
  });
});
