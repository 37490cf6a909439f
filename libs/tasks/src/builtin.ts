import { defineTask, z } from '@keyflow/workflow';

/** Does nothing and returns null (benchmarks measure the runtime around it). */
export const noop = defineTask({
  type: 'noop',
  input: z.unknown(),
  output: z.null(),
  description: 'does nothing; returns null',
});

/** Returns its input (the built-in workflows and tests run on it). */
export const echo = defineTask({
  type: 'echo',
  input: z.unknown(),
  output: z.unknown(),
  description: 'returns its input',
});
