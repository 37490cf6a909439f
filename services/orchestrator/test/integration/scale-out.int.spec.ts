import { runScaleScenario } from '@keyflow/testing';
import { allWorkflows as builtinWorkflows } from '@keyflow/example-test-workloads';

jest.setTimeout(240_000);

/**
 * Issue "Scale-out": with kafkajs's round-robin assigner, 4 instances over 6 partitions got partition p of
 * wf.requests and of task.results on different members, which fenced each other, and the one holding the results
 * dropped TaskCompleted of runs started elsewhere as "unknown run"; instances started at the same moment crashed on
 * the registry's 409 for a concurrent compatibility rule. Here: 3 instances + 1 worker started together on new
 * topics over 6 partitions, a 4th added mid-load (4 members over 6 partitions: round-robin splits there), then one
 * of the first three SIGKILLed.
 */
describe('scale-out: orchestrator instances joining and dying under load', () => {
  it('every run completes once, partition p of every input topic lands on one member, no survivor exits', async () => {
    const report = await runScaleScenario({
      label: 'scale-out',
      orchestrators: 3,
      workers: 1,
      partitions: 6,
      runs: 90,
      sagas: 10,
      sessionTimeoutMs: 6_000,
      timeoutMs: 90_000,
      workflows: builtinWorkflows,
      log: (l) => console.log(l),
    });
    console.log(
      JSON.stringify({ ...report, snapshots: report.snapshots.map(({ members: _, ...rest }) => rest) }),
    );
    expect(report.snapshots.map(({ phase, settled, split }) => ({ phase, settled, split }))).toEqual(
      ['start', 'added', 'killed'].map((phase) => ({ phase, settled: true, split: [] })),
    );
    // Sticky: the 4th member takes one partition (2,2,2 -> 2,2,1,1: the fewest moves a balanced assignment allows);
    // after the kill only the dead member's partitions move.
    const [, added, killed] = report.snapshots;
    expect(added.moved).toBe(1);
    expect(report.victimPartitions.length).toBeGreaterThan(0);
    expect(killed.moved).toBe(report.victimPartitions.length);
    expect(report.exits).toEqual([]);
    expect(report.lost.slice(0, 5)).toEqual([]);
    expect(report.notCompleted).toEqual([]);
    expect(report.duplicateStepCompleted).toEqual([]);
    expect(report.wrongSteps).toEqual([]);
    expect(report.completed).toBe(100);
  });
});
