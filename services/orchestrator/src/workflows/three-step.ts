import { workflow } from '@keyflow/workflow';
import { echo } from '@keyflow/tasks';

/** Three `echo` steps in sequence, each given the one before's output (benchmarks, tests, the latency target). */
export const threeStep = workflow('three-step', 1)
  .task('first', echo, { input: (c) => ({ step: 1, input: c.input }) })
  .task('second', echo, { input: (c) => ({ step: 2, previous: c.outputs.first }) })
  .task('third', echo, { input: (c) => ({ step: 3, previous: c.outputs.second }) })
  .build();
