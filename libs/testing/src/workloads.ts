/**
 * The test workloads: two task contracts (`noop`, `echo`) and the workflows on them (`three-step`, `fan-out`) that
 * the integration tests, the benchmarks and the chaos and scale scenarios run. They are not part of the platform:
 * an orchestrator registers them only when it is given them (examples/test-workloads is such an application).
 */
import { defineTask, workflow, z } from '@keyflow/workflow';

/** Does nothing and returns null (benchmarks measure the runtime around it). */
export const noop = defineTask({
  type: 'noop',
  input: z.unknown(),
  output: z.null(),
  description: 'does nothing; returns null',
});

/** Returns its input (the test workflows and tests run on it). */
export const echo = defineTask({
  type: 'echo',
  input: z.unknown(),
  output: z.unknown(),
  description: 'returns its input',
});

/** Three `echo` steps in sequence, each given the one before's output (benchmarks, tests, the latency target). */
export const threeStep = workflow('three-step', 1)
  .task('first', echo, { input: (c) => ({ step: 1, input: c.input }) })
  .task('second', echo, { input: (c) => ({ step: 2, previous: c.outputs.first }) })
  .task('third', echo, { input: (c) => ({ step: 3, previous: c.outputs.second }) })
  .build();

/**
 * A map step over `input.count` items (default 10) on the `echo` handler, 64 in flight, then one step over all
 * outputs: the fan-out / fan-in shape at any size (bench:map --e2e, the map tests).
 */
export const fanOut = workflow('fan-out', 1)
  .map('each', echo, {
    items: (c) => Array.from({ length: Number(c.input.count ?? 10) }, (_, i) => i),
    input: (item) => ({ item }),
    concurrency: 64,
  })
  .task('sum', echo, { input: (c) => ({ n: c.outputs.each.length }) })
  .build();

/** The test workflows: `three-step` and `fan-out`. */
/**
 * `three-step` with local steps (`.local`, docs/workflows.md "Local steps"): the same three `echo` calls run in the
 * orchestrator's process, no worker round trip. Not in {@link testWorkflows}: an orchestrator that registers it needs
 * a `localStep(echo, ...)` handler (examples/test-workloads/src/orchestrator.ts has one; bench:orchestrator --local).
 */
export const threeStepLocal = workflow('three-step-local', 1)
  .local('first', echo, { input: (c) => ({ step: 1, input: c.input }) })
  .local('second', echo, { input: (c) => ({ step: 2, previous: c.outputs.first }) })
  .local('third', echo, { input: (c) => ({ step: 3, previous: c.outputs.second }) })
  .build();

export const testWorkflows = [threeStep, fanOut];
