import { workflow } from '@keyflow/workflow';
import { echo } from '@keyflow/tasks';

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
