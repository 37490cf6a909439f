import { workflowStats } from '../../src/engine/read-model';
import { taskTypeOfTopic } from '@keyflow/ops';
import { taskTopic } from '@keyflow/schemas';

const run = (workflow: string, status: string, startedAt: number, endedAt?: number) => ({
  workflow,
  status: status as never,
  startedAt,
  endedAt,
});

describe('the console figures', () => {
  it('chain time percentiles are nearest-rank over the runs that ended in the window, per workflow', () => {
    // a: 20 runs ended in the window taking 1..20 ms, one ended two hours before (1,000 ms), one still running.
    const now = 10 * 3_600_000;
    const runs = Array.from({ length: 20 }, (_, i) =>
      run('a', 'completed', now - 1_000, now - 1_000 + i + 1),
    );
    runs.push(
      run('a', 'failed', now - 7_201_000, now - 7_200_000),
      run('a', 'running', 900),
      run('b', 'running', 5),
    );
    const [a, b] = workflowStats(runs, now);
    expect(a).toEqual({
      workflow: 'a',
      byStatus: { completed: 20, failed: 1, running: 1 },
      ended: 20,
      chainP50Ms: 10, // the 10th of 20
      chainP95Ms: 19, // the 19th of 20
    });
    expect(b).toEqual({
      workflow: 'b',
      byStatus: { running: 1 },
      ended: 0,
      chainP50Ms: null,
      chainP95Ms: null,
    });
  });

  it('a single ended run is both its p50 and its p95', () => {
    expect(workflowStats([run('w', 'completed', 10, 52)], 60_000)[0]).toMatchObject({
      chainP50Ms: 42,
      chainP95Ms: 42,
    });
  });

  it('task types are read back from task topics only', () => {
    expect(taskTypeOfTopic(taskTopic('etl.load'))).toBe('etl.load');
    expect([
      taskTypeOfTopic('task.results'),
      taskTypeOfTopic('task.x.dlq'),
      taskTypeOfTopic('wf.requests'),
    ]).toEqual([undefined, undefined, undefined]);
  });
});
