import { defineTask, workflow, z } from '@keyflow/workflow';

/**
 * The soak's step: the handler (bench/soak/worker.ts) records each execution in PostgreSQL with the command's
 * idempotency key, so a step executed twice shows as two rows, and returns its input.
 */
export const soakStep = defineTask({
  type: 'soak.step',
  input: z.object({ step: z.string(), version: z.number().int(), data: z.unknown() }),
  output: z.object({ step: z.string(), version: z.number().int(), data: z.unknown() }),
  description: 'records its execution (soak) and returns its input',
});

/** The signal both approval waits take: a duplicate of the first one would complete the second. */
export const SOAK_SIGNAL = 'approved';

/**
 * The soak workflow at `version`: three steps with two approval waits on the same signal name between the first and
 * the second (`first`, `approve1`, `approve2`, `second`, `third`). The second step's input carries both approvals'
 * payloads, which the worker records: a signal applied twice shows as `[1, 1]` instead of `[1, 2]`. Versions differ
 * only in the version they stamp on each step's input, so a run's steps say which definition drove them.
 */
export function soakWorkflow(version: number) {
  return workflow('soak', version)
    .task('first', soakStep, { input: (c) => ({ step: 'first', version, data: c.input }) })
    .wait('approve1', { signal: SOAK_SIGNAL, timerMs: 600_000 })
    .wait('approve2', { signal: SOAK_SIGNAL, timerMs: 600_000 })
    .task('second', soakStep, {
      input: (c) => ({ step: 'second', version, data: [c.outputs.approve1, c.outputs.approve2] }),
    })
    .task('third', soakStep, { input: (c) => ({ step: 'third', version, data: c.outputs.second }) })
    .build();
}

/** The versions an orchestrator of the soak registers: `SOAK_VERSIONS` (e.g. `1` or `1,2`). */
export const soakVersions = (env: NodeJS.ProcessEnv = process.env): number[] =>
  (env.SOAK_VERSIONS ?? '1').split(',').map(Number);
