import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Pool } from 'pg';
import type { Browser, Page } from 'playwright-core';
import { eventually } from '@keyflow/testing';
import type { TriggerView } from '../../src/api/ops.service';
import { launchChromium, OrchestratorHarness, post, SCREENSHOTS_DIR } from './support';

jest.setTimeout(300_000);

const WORKER_FIXTURE = 'services/workers/test/fixtures/test-worker.ts';
/** Where the screenshots of each page go (one PNG per page the test visits). */
const SCREENSHOTS = join(SCREENSHOTS_DIR, 'console');
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
    const orch = await h.startOrchestrator({ ORCHESTRATOR_LAG_INTERVAL_MS: '2000' });
    url = await orch.ready;
    await h.startWorker(
      {
        TEST_TABLE_PREFIX: table,
        TEST_CREATE_TABLES: '1',
        WORKER_TASK_TYPES: 'charge,refund',
        // A limit no run here reaches, so the queues panel has flow control to show.
        WORKER_FLOW_LIMITS: JSON.stringify({ charge: { concurrency: 5, ratePerSec: 50 } }),
      },
      WORKER_FIXTURE,
    );
    await h.readEvents();
    browser = await launchChromium();
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

  it('shows a run finish and its timeline; finds poison commands in the DLQ panel, redrives one after its fix, and the pending count drops by one', async () => {
    const dialogs: string[] = [];
    page.on('dialog', (d) => void dialogs.push(d.message()));
    await page.goto(`${url}/console/`);
    await page.locator('[data-testid="runs"]').waitFor();
    const ok = (await post(`${url}/runs`, { workflow: 'payment-plain', input: { amount: 5 } })).body
      .runId as string;
    const okRow = page.locator(`tr[data-run-id="${ok}"]`); // appears and turns completed by the page's own refresh
    await okRow.locator('td[data-status="completed"]').waitFor({ timeout: LIVE_MS });
    await shot('runs');

    await okRow.click();
    await page.locator('[data-testid="run-title"]', { hasText: ok }).waitFor();
    await page.locator('[data-testid="timeline"] td', { hasText: 'RunCompleted' }).waitFor();
    await expectCells(page.locator('[data-testid="steps"] tr[data-step="charge"]'), [
      'charge',
      'completed',
      '1',
    ]);
    await shot('run-timeline');

    // Two charges refused as bad input (TaskInputError): dead-lettered with triage headers; their runs fail.
    const poison = async (fix: string) =>
      (await post(`${url}/runs`, { workflow: 'payment-plain', input: { amount: 9, poison: fix } })).body
        .runId as string;
    const fixedLater = await poison('console-fix-a');
    const stillBad = await poison('console-fix-b');
    await page.goto(`${url}/console/#/dlq`);
    const dlqRow = page.locator('tr[data-dlq-topic="task.charge.dlq"]');
    await dlqRow.locator('[data-testid="pending"]', { hasText: /^2$/ }).waitFor({ timeout: LIVE_MS });
    await shot('dlq-topics');
    await dlqRow.click();
    const record = page.locator(`[data-testid="dlq-records"] tr[data-key="${fixedLater}"]`);
    await record.waitFor({ timeout: LIVE_MS });
    await expectText(record, /TaskInputError/);
    await expectText(record, /field "amount" is not a number/);
    await expectText(record, /"poison": "console-fix-a"/); // the value decoded with task.charge's schema
    await expectText(record.locator('[data-testid="ledger"]'), /^pending/);
    await shot('dlq-records');

    // The fix for one of them, then a redrive of that one record from the console, confirmed with its count.
    await pg.query(`insert into ${table}_fix(name) values ('console-fix-a')`);
    await record.locator('[data-testid="redrive-one"]').click();
    // Its run failed: the console first says why the API refuses it, and redrives it only once told to re-run it.
    await eventually(
      'the confirmation',
      () => dialogs.find((d) => /^Redrive 1 record\(s\): record \d+@\d+\?$/.test(d)),
      { timeoutMs: LIVE_MS },
    );
    expect(dialogs.find((d) => d.includes('refused'))).toContain(`run ${fixedLater} is failed`);
    await page.goto(`${url}/console/#/dlq`);
    await dlqRow.locator('[data-testid="pending"]', { hasText: /^1$/ }).waitFor({ timeout: LIVE_MS });
    await shot('dlq-after-redrive');
    await eventually(
      'the redriven charge ran',
      async () =>
        (await pg.query(`select 1 from ${table}_exec where idempotency_key = $1`, [`${fixedLater}/charge`]))
          .rowCount,
      { until: (n) => n === 1, timeoutMs: LIVE_MS },
    );
    await page.goto(`${url}/console/#/dlq/task.charge.dlq`);
    const other = page.locator(`[data-testid="dlq-records"] tr[data-key="${stillBad}"]`);
    await expectText(other.locator('[data-testid="ledger"]'), /^pending/);
    expect(await page.locator(`[data-testid="dlq-records"] tr[data-key="${fixedLater}"]`).count()).toBe(0);
    expect(
      (await pg.query(`select 1 from ${table}_exec where idempotency_key = $1`, [`${stillBad}/charge`]))
        .rowCount,
    ).toBe(0);

    // The queues panel: the workers' group on task.charge, one pending DLQ record, chain times and retry counts.
    await page.goto(`${url}/console/#/queues`);
    await page.locator('[data-testid="queues"] tr[data-task-type="charge"]').waitFor({ timeout: LIVE_MS });
    await expectText(page.locator('[data-testid="dlq-pending-total"] .v'), /^1$/);
    const chain = page.locator('[data-testid="chain"] tr[data-workflow="payment-plain"]');
    await expectText(chain.locator('td').nth(1), /^(?=.*\bcompleted 1\b)(?=.*\bfailed 2\b)/); // runs by status
    await expectText(chain.locator('td').nth(2), /^3$/); // ended in the window
    await expectText(chain.locator('[data-testid="chain-p50"]'), /^\d+(\.\d+)? (ms|s)$/);
    await expectCells(page.locator('[data-testid="retries"] tr', { hasText: 'charge' }), [
      'charge',
      '3',
      '0',
      '0.0 %',
      '2',
    ]);
    // Flow control: the workers' limit of charge, nothing running or waiting once the runs ended.
    await expectCells(page.locator('[data-testid="flow"] tr[data-task-type="charge"]'), [
      'charge',
      '5',
      '—',
      '—',
      '50/s',
      '0',
      '0',
    ]);
    await shot('queues');
  });

  it("the Triggers panel says when the instance has no topic trigger, and shows a trigger's lag, runs in flight, backpressure pause, partitions and DLQ link from the API answer", async () => {
    // This instance runs no trigger: the API answers an empty list and the panel says so.
    expect(await (await fetch(`${url}/ops/triggers`)).json()).toEqual({ triggers: [] });
    await page.goto(`${url}/console/#/triggers`);
    await expectText(page.locator('[data-testid="triggers"] td'), /^no topic triggers on this instance$/);
    await shot('triggers-none');

    // A status as a trigger runner reports it, answered to the page in place of the orchestrator's (no runner here).
    const answer = { triggers: [ORDERS_TRIGGER] };
    await page.route('**/ops/triggers', (r) => r.fulfill({ json: answer }));
    try {
      await page.reload();
      const row = page.locator('[data-testid="triggers"] tr[data-trigger="orders"]');
      await expectCells(row, [
        'orders',
        'start',
        'orders',
        'team.keyflow-trigger-orders',
        'workflow order-saga',
      ]);
      await expectText(row.locator('[data-testid="trigger-lag"]'), /^1,234$/);
      await expectText(row.locator('[data-testid="trigger-in-flight"]'), /^7 \/ 10$/);
      await expectText(row.locator('[data-testid="trigger-reading"]'), /^paused \(backpressure\)$/);
      expect(await row.locator('[data-testid="trigger-dlq"]').getAttribute('href')).toBe(
        '#/dlq/trigger.orders.dlq',
      );
      const partitions = page.locator(
        '[data-trigger-partitions="orders"] [data-testid="trigger-partitions"]',
      );
      await expectCells(partitions.locator('tr[data-partition="0"]'), [
        '0',
        '1,200',
        '98765',
        '2',
        'paused (backpressure)',
      ]);
      await expectCells(partitions.locator('tr[data-partition="1"]'), ['1', '34', '17', '0', 'reading']);
      await shot('triggers');

      // The page's own refresh shows the next answer.
      answer.triggers = [{ ...ORDERS_TRIGGER, lag: 5, inFlight: 3, paused: false }];
      await expectText(row.locator('[data-testid="trigger-in-flight"]'), /^3 \/ 10$/);
      await expectText(row.locator('[data-testid="trigger-lag"]'), /^5$/);
      await expectText(row.locator('[data-testid="trigger-reading"]'), /^reading$/);
    } finally {
      await page.unroute('**/ops/triggers');
    }
  });

  it('the ops API refuses what would act on more than was asked: no JSON, unknown fields, an offset without its partition, no filter; and names a missing DLQ', async () => {
    const redriveUrl = `${url}/ops/dlq/task.charge.dlq/redrive`;
    const send = (body: string, type = 'application/json') =>
      fetch(redriveUrl, { method: 'POST', headers: { 'content-type': type }, body });
    const form = await send('partition=0&offset=0', 'application/x-www-form-urlencoded');
    expect(form.status).toBe(415);
    for (const body of [{}, { partiton: 0, offset: '0' }, { offset: '0' }, { all: true, key: 'k' }]) {
      const r = await send(JSON.stringify(body));
      expect([JSON.stringify(body), r.status]).toEqual([JSON.stringify(body), 400]);
    }
    // The one pending record is a command of a failed run: refused, with the reason, unless allowRerun.
    const all = (await (await send(JSON.stringify({ all: true, dryRun: true }))).json()) as {
      refusals: Array<{ code: string; reason: string }>;
    };
    expect(all).toMatchObject({ dryRun: true, moved: 0, refused: 1, alreadyHandled: 1 });
    expect(all.refusals[0]).toMatchObject({
      code: 'RUN_ENDED',
      reason: expect.stringMatching(/^run \S+ is failed/),
    });
    const allowed = await (await send(JSON.stringify({ all: true, dryRun: true, allowRerun: true }))).json();
    expect(allowed).toMatchObject({ dryRun: true, moved: 1, refused: 0 });
    const missing = await fetch(`${url}/ops/dlq/task.nope.dlq/records`);
    expect([missing.status, ((await missing.json()) as { code?: string }).code]).toEqual([
      404,
      'DLQ_NOT_FOUND',
    ]);
    expect((await fetch(`${url}/ops/dlq/task.charge.dlq/records?partition=`)).status).toBe(400);
  });
});

/** A start trigger's status as GET /ops/triggers answers it: partition 0 behind and paused, partition 1 reading. */
const ORDERS_TRIGGER: TriggerView = {
  name: 'orders',
  kind: 'start',
  topic: 'orders',
  group: 'team.keyflow-trigger-orders',
  target: 'order-saga',
  inFlight: 7,
  maxInFlight: 10,
  held: 2,
  paused: true,
  lag: 1234,
  partitions: [
    { topic: 'orders', partition: 0, lag: 1200, position: '98765', paused: true, held: 2 },
    { topic: 'orders', partition: 1, lag: 34, position: '17', paused: false, held: 0 },
  ],
  dlq: 'team.trigger.orders.dlq',
  dlqLogical: 'trigger.orders.dlq',
  counts: { applied: 5000, deadLettered: 1, skippedReplay: 0 },
};

/** Waits until the first cells of a table row read `cells` (the console re-renders on its own timer). */
async function expectCells(row: ReturnType<Page['locator']>, cells: string[]): Promise<void> {
  await eventually(
    `cells ${cells.join(' | ')}`,
    async () => (await row.first().locator('td').allTextContents()).slice(0, cells.length),
    { until: (got) => JSON.stringify(got) === JSON.stringify(cells), timeoutMs: LIVE_MS },
  );
}

/** Waits until the locator's text matches (the console re-renders on its own timer). */
async function expectText(locator: ReturnType<Page['locator']>, re: RegExp): Promise<void> {
  await locator.filter({ hasText: re }).first().waitFor({ timeout: LIVE_MS });
}
