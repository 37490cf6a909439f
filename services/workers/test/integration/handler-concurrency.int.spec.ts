import type { TaskCompleted } from '@keyflow/schemas';
import { WorkerHarness } from './support';

jest.setTimeout(120_000);

describe('handler concurrency', () => {
  const h = new WorkerHarness('handlers');
  const LIMIT = 3;
  beforeAll(async () => {
    await h.setup(['gauge']);
    // Many more commands dispatched than handlers allowed: the bound on handlers is the one that must hold.
    await h.startWorker({
      WORKER_MAX_CONCURRENT_HANDLERS: String(LIMIT),
      WORKER_MAX_IN_FLIGHT: '64',
      WORKER_MAX_IN_FLIGHT_PER_PARTITION: '64',
    });
  });
  afterAll(() => h.teardown());

  it('never runs more handlers at once than WORKER_MAX_CONCURRENT_HANDLERS, and a task waiting for a slot does not spend its attempt timeout', async () => {
    const HANDLER_MS = 150;
    // 24 keys, so the ordered consumer dispatches them all at once; 8 rounds of 3 take at least 1.2 s, longer
    // than one attempt's timeout: a timeout started before the handler's slot would fail the later ones.
    const commands = Array.from({ length: 24 }, (_, i) =>
      h.command('gauge', `g${i}`, { ms: HANDLER_MS }, { timeoutMs: 1_000, maxAttempts: 1 }),
    );
    await h.send(commands);
    const results = await h.results.wait(commands.length, 60_000);
    expect(results.map((r) => r.event)).toEqual(commands.map(() => 'TaskCompleted'));
    const running = results.map(
      (r) => (JSON.parse((r.value as TaskCompleted).output) as { running: number }).running,
    );
    // Reached (the tasks did run side by side) and never passed.
    expect(Math.max(...running)).toBe(LIMIT);
  });
});
