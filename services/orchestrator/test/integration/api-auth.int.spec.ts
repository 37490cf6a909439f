import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { keyflowCli as keyflow, launchChromium, OrchestratorHarness, post, SCREENSHOTS_DIR } from './support';

jest.setTimeout(300_000);

const READER = 'reader-key-0123456789abcdefghij';
const OPERATOR = 'operator-key-0123456789abcdefghij';

describe('API authentication (KEYFLOW_API_KEYS)', () => {
  const h = new OrchestratorHarness('api-auth');
  let url: string;
  let browser: Browser | undefined;
  beforeAll(async () => {
    const orch = await h.startOrchestrator({
      KEYFLOW_API_KEYS: JSON.stringify([
        { name: 'dashboards', key: READER, scopes: ['read'] },
        { name: 'ops', key: OPERATOR, scopes: ['read', 'control'] },
      ]),
      KEYFLOW_METRICS_AUTH: 'true',
    });
    url = await orch.ready;
  });
  afterAll(async () => {
    await browser?.close();
    await h.teardown();
  });

  const get = (path: string, headers: Record<string, string> = {}) => fetch(`${url}${path}`, { headers });
  const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

  it('a request without credentials, or with an unknown key, gets 401 on every run, control and ops route', async () => {
    for (const path of [
      '/runs',
      '/runs/x',
      '/ops/overview',
      '/ops/triggers',
      '/ops/dlq/task.echo.dlq/records',
    ]) {
      const r = await get(path);
      expect([path, r.status, r.headers.get('www-authenticate')]).toEqual([
        path,
        401,
        'Bearer realm="keyflow"',
      ]);
      expect(((await r.json()) as { code: string }).code).toBe('UNAUTHENTICATED');
    }
    const wrong = await get('/runs', bearer('not-a-key-of-this-orchestrator-at-all'));
    expect([wrong.status, wrong.headers.get('www-authenticate')]).toEqual([
      401,
      'Bearer realm="keyflow", error="invalid_token"',
    ]);
    for (const path of [
      '/runs',
      '/runs/batch',
      '/runs/x/cancel',
      '/runs/x/retry',
      '/ops/dlq/task.echo.dlq/redrive',
    ])
      expect([path, (await post(`${url}${path}`, {})).status]).toEqual([path, 401]);
  });

  it('a read key reads but cannot control (403 naming the scope); a control key starts a run; X-API-Key works too', async () => {
    expect((await get('/runs', bearer(READER))).status).toBe(200);
    expect((await get('/runs', { 'x-api-key': READER })).status).toBe(200);
    expect((await get('/ops/overview?maxAgeMs=600000', bearer(READER))).status).toBe(200);
    expect((await get('/ops/triggers', bearer(READER))).status).toBe(200);
    const refused = await fetch(`${url}/runs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...bearer(READER) },
      body: JSON.stringify({ workflow: 'three-step', input: {} }),
    });
    const body = (await refused.json()) as { code: string; scope: string };
    expect([refused.status, body.code, body.scope, refused.headers.get('www-authenticate')]).toEqual([
      403,
      'FORBIDDEN',
      'control',
      'Bearer realm="keyflow", error="insufficient_scope", scope="control"',
    ]);
    const started = await post(`${url}/runs`, { workflow: 'three-step', input: {} }, bearer(OPERATOR));
    expect(started.status).toBe(202);
    // The batch start needs control too, checked before any item.
    const batch = { runs: [{ workflow: 'three-step', input: {} }] };
    expect((await post(`${url}/runs/batch`, batch, bearer(READER))).status).toBe(403);
    expect((await post(`${url}/runs/batch`, batch, bearer(OPERATOR))).status).toBe(200);
  });

  it('health, the console page and the OpenAPI document stay open; metrics need read (KEYFLOW_METRICS_AUTH) however the path is spelled; the webhook door keeps its own signature check', async () => {
    for (const path of ['/health', '/ops/meta', '/console/', '/console/console.js', '/docs/openapi.json'])
      expect([path, (await get(path)).status]).toEqual([path, 200]);
    for (const path of ['/metrics', '/metrics/', '/METRICS', '/Metrics/'])
      expect([path, (await get(path)).status, (await get(path, bearer(READER))).status]).toEqual([
        path,
        401,
        200,
      ]);
    const hook = await post(`${url}/webhooks/three-step`, {});
    expect([hook.status, hook.body.code]).toEqual([401, 'WEBHOOK_SIGNATURE_INVALID']);
  });

  it('the CLI sends KEYFLOW_API_KEY; without it the API answer names the missing credentials', async () => {
    const env = { ...h.env(), KEYFLOW_API_URL: url };
    const ok = await keyflow(['runs', 'ls', '--json'], { ...env, KEYFLOW_API_KEY: READER });
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.out).runs.length).toBeGreaterThanOrEqual(1);
    const without = await keyflow(['runs', 'ls'], env);
    expect(without.code).toBe(1);
    expect(without.err).toMatch(/HTTP 401: authentication required/);
    const readOnly = await keyflow(['runs', 'start', 'three-step'], { ...env, KEYFLOW_API_KEY: READER });
    expect(readOnly.err).toMatch(/HTTP 403: the API key dashboards lacks the control scope/);
  });

  it('the console asks for a key, then shows the runs', async () => {
    browser = await launchChromium();
    const page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
    await page.goto(`${url}/console/`);
    const form = page.locator('[data-testid="sign-in"]');
    await form.waitFor({ timeout: 30_000 });
    mkdirSync(join(SCREENSHOTS_DIR, 'console'), { recursive: true });
    await page.screenshot({ path: join(SCREENSHOTS_DIR, 'console', 'sign-in.png') });
    await form.locator('input[name="key"]').fill('a-wrong-key-that-is-long-enough-000');
    await form.locator('button[type="submit"]').click();
    await page.getByText('that API key was not accepted').waitFor({ timeout: 30_000 });
    await page.locator('[data-testid="sign-in"] input[name="key"]').fill(READER);
    await page.locator('[data-testid="sign-in"] button[type="submit"]').click();
    await page.locator('[data-testid="runs"] tr[data-run-id]').first().waitFor({ timeout: 30_000 });
    await page.locator('#sign-out').click();
    await page.locator('[data-testid="sign-in"]').waitFor({ timeout: 30_000 });
  }, 900_000);
});
