import type { TaskCommand } from '@keyflow/schemas';
import { LocalStepRunner, type LocalStepDeps } from '../../src/engine/local-steps';
import type { LocalCommand } from '../../src/engine/mapping';

/**
 * The local-step runner (docs/workflows.md "Local steps"): at most ORCHESTRATOR_LOCAL_STEP_CONCURRENCY commands are
 * in the executor at once (a waiting command holds no idempotency lease), and the commands waiting for a slot are
 * bounded (64 per slot; the rest are left to their step timeout), however fast the engine dispatches.
 */
const CONCURRENCY = 2;
const warnings: unknown[] = [];
const deps = {
  cfg: { ORCHESTRATOR_LOCAL_STEP_CONCURRENCY: CONCURRENCY, ORCHESTRATOR_LOCAL_STEP_LEASE_MS: 1_000 },
  codec: { physical: (t: string) => t, encode: () => Buffer.alloc(0) },
  logger: { warn: (o: unknown) => warnings.push(o), error: () => undefined, info: () => undefined },
} as unknown as LocalStepDeps;

const command = (i: number): LocalCommand => ({
  command: {
    runId: `r${i}`,
    stepId: 'a',
    taskType: 'local.t',
    attempt: 1,
    idempotencyKey: `r${i}/a`,
    timeoutMs: 60_000,
  } as unknown as TaskCommand,
  headers: undefined,
});

describe('local-step runner', () => {
  it('runs at most its concurrency at once and keeps at most 64 per slot waiting; the rest are left to their step timeout', async () => {
    const runner = new LocalStepRunner(deps, new Map());
    let inFlight = 0;
    let maxInFlight = 0;
    let handled = 0;
    const release: Array<() => void> = [];
    (runner as unknown as { executor: unknown }).executor = {
      handle: () => {
        inFlight++;
        handled++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        return new Promise<void>((r) =>
          release.push(() => {
            inFlight--;
            r();
          }),
        );
      },
    };
    runner.run(Array.from({ length: 1_000 }, (_, i) => command(i)));
    await new Promise((r) => setImmediate(r));
    expect(maxInFlight).toBe(CONCURRENCY);
    // 2 running, 128 waiting, 870 dropped with a warning each.
    expect(warnings).toHaveLength(1_000 - CONCURRENCY - 64 * CONCURRENCY);
    // As slots free up, the waiting ones run, never more than the concurrency at once.
    while (release.length) {
      release.shift()!();
      await new Promise((r) => setImmediate(r));
    }
    expect(handled).toBe(CONCURRENCY + 64 * CONCURRENCY);
    expect(maxInFlight).toBe(CONCURRENCY);
  });
});
