import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Pool } from 'pg';
import { chromium, type Browser, type Page } from 'playwright-core';
import { ensureDebianTool } from '@keyflow/testing';
import { OrchestratorHarness, post } from './support';

jest.setTimeout(300_000);

const WORKER_FIXTURE = 'services/workers/test/fixtures/test-worker.ts';
/** Where the screenshots of each page go (one PNG per page the test visits). */
const SCREENSHOTS = join(__dirname, '../../../../test-results/console');
/** Longest wait for something the console shows live (it refreshes every 2-5 s), ms. */
const LIVE_MS = 60_000;

/**
 * The ops console as an operator uses it, in a real headless Chromium (Debian's package, driven by playwright-core):
 * the page loads from the orchestrator, a run is seen finishing, its timeline opened, a poison command found in the
 * DLQ panel with its triage headers and decoded value, redriven after the fix, and the pending count drops.
 */
describe('the ops console (headless Chromium)', () => {
  const h = new OrchestratorHarness('console');
  const table = h.ns.prefix.replace(/[^a-z0-9]/g, '_');
  const pg = new Pool({ connectionString: process.env.POSTGRES_URL, max: 2 });
  let browser: Browser | undefined;
  let page: Page;
  let url: string;

  beforeAll(async () => {
    mkdirSync(SCREENSHOTS, { recursive: true });
    const executablePath = await ensureDebianTool('chromium', 'chromium');
    const orch = await h.startOrchestrator({ ORCHESTRATOR_LAG_INTERVAL_MS: '2000' });
    url = await orch.ready;
    await h.startWorker(
      { TEST_TABLE_PREFIX: table, TEST_CREATE_TABLES: '1', WORKER_TASK_TYPES: 'charge,refund' },
      WORKER_FIXTURE,
    );
    await h.readEvents();
    // The flags keep Chromium off the network (a closed network refuses its background connections); playwright
    // gives it a fresh profile.
    browser = await chromium.launch({
      executablePath,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on('dialog', (d) => void d.accept()); // the console asks before it redrives
  }, 900_000); // a fresh machine installs chromium first (apt-get)
  afterAll(async () => {
    await browser?.close();
    await h.teardown();
    for (const t of ['exec', 'effect', 'order', 'attempt', 'fix', 'abort'])
      await pg.query(`drop table if exists ${table}_${t}`);
    await pg.end();
  });

  const shot = (name: string) => page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });

  it('shows a run finish and its timeline, and a poison command in the DLQ panel that a redrive after the fix takes out', async () => {
    const ok = (await post(`${url}/runs`, { workflow: 'payment-plain', input: { amount: 5 } })).body
      .runId as string;
    await page.goto(`${url}/console/`);
    const okRow = page.locator(`tr[data-run-id="${ok}"]`);
    await okRow.locator('td[data-status="completed"]').waitFor({ timeout: LIVE_MS });
    await shot('runs');

    await okRow.click();
    await page.locator('[data-testid="run-title"]', { hasText: ok }).waitFor();
    const timeline = page.locator('[data-testid="timeline"]');
    await timeline.locator('td', { hasText: 'RunCompleted' }).waitFor();
    await expectText(page.locator('[data-testid="steps"] tr[data-step="charge"]'), /charge\s*completed\s*1/);
    await shot('run-timeline');

    // A charge refused as bad input (TaskInputError): dead-lettered with triage headers; the run fails.
    const poisoned = (
      await post(`${url}/runs`, { workflow: 'payment-plain', input: { amount: 9, poison: 'console-fix' } })
    ).body.runId as string;
    await page.goto(`${url}/console/#/dlq`);
    const dlqRow = page.locator('tr[data-dlq-topic="task.charge.dlq"]');
    await dlqRow.locator('[data-testid="pending"]', { hasText: /^1$/ }).waitFor({ timeout: LIVE_MS });
    await shot('dlq-topics');
    await dlqRow.click();
    const record = page.locator(`[data-testid="dlq-records"] tr[data-key="${poisoned}"]`);
    await record.waitFor({ timeout: LIVE_MS });
    await expectText(record, /TaskInputError/);
    await expectText(record, /field "amount" is not a number/);
    await expectText(record, /"poison": "console-fix"/); // the value decoded with task.charge's schema
    await expectText(record.locator('[data-testid="ledger"]'), /^pending/);
    await shot('dlq-records');

    // The fix, then a redrive from the console: the command runs (its effect is recorded) and the count drops.
    await pg.query(`insert into ${table}_fix(name) values ('console-fix')`);
    await record.locator('[data-testid="redrive-one"]').click();
    await page.goto(`${url}/console/#/dlq`);
    await dlqRow.locator('[data-testid="pending"]', { hasText: /^0$/ }).waitFor({ timeout: LIVE_MS });
    await shot('dlq-after-redrive');
    const ran = await pg.query(`select 1 from ${table}_exec where idempotency_key = $1`, [
      `${poisoned}/charge`,
    ]);
    expect(ran.rowCount).toBe(1);

    // The queues panel: the workers' group on task.charge caught up, the chain time of payment-plain measured.
    await page.goto(`${url}/console/#/queues`);
    await page.locator('[data-testid="queues"] tr[data-task-type="charge"]').waitFor({ timeout: LIVE_MS });
    await expectText(page.locator('[data-testid="dlq-pending-total"]'), /^0/);
    const chain = page.locator('[data-testid="chain"] tr[data-workflow="payment-plain"]');
    await expectText(chain, /completed 1/);
    await expectText(chain, /failed 1/);
    await shot('queues');
  });
});

/** Waits until the locator's text matches (the console re-renders on its own timer). */
async function expectText(locator: ReturnType<Page['locator']>, re: RegExp): Promise<void> {
  await locator.filter({ hasText: re }).first().waitFor({ timeout: LIVE_MS });
}
