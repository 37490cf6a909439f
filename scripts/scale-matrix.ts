/**
 * `npm run test:scale`: the scale-out matrix, outside CI (minutes, not a timed test). For each orchestrator count
 * (default 1 to 5): that many orchestrators and the workers started at the same moment on new topics, the runs of
 * `three-step` and `order-saga` started over HTTP spread across the instances, one instance added and one of the
 * first SIGKILLed mid-load (the scenario of libs/testing/src/scenarios/scale.ts, which the CI
 * test scale-out.int.spec.ts runs at a small size). Prints one table row per count and exits non-zero when a run
 * was lost or duplicated, a surviving process exited, or a partition of wf.requests and task.results was split.
 *
 *   eval "$(infra/local/stack.sh up)" && npm run test:scale -- --instances 1,2,3,4,5 --runs 500 --sagas 50
 */
import { Command } from 'commander';
import { runScaleScenario, type ScaleReport } from '@keyflow/testing';
import { allWorkflows as builtinWorkflows } from '@keyflow/example-test-workloads';

const opts = new Command()
  .option('--instances <list>', 'orchestrator counts started together, one row each', '1,2,3,4,5')
  .option('--workers <n>', 'worker processes started with them', '2')
  .option('--partitions <n>', 'partitions of the run-keyed and task topics', '6')
  .option('--runs <n>', 'three-step runs per row', '500')
  .option('--sagas <n>', 'order-saga runs per row', '50')
  .option('--session-timeout <ms>', 'ORCHESTRATOR_SESSION_TIMEOUT_MS', '6000')
  .option('--timeout <ms>', 'deadline for every run to end, per row', '300000')
  .parse()
  .opts<{
    instances: string;
    workers: string;
    partitions: string;
    runs: string;
    sagas: string;
    sessionTimeout: string;
    timeout: string;
  }>();

type Row = { n: number; report?: ScaleReport; error?: string };

const ok = (r: ScaleReport) =>
  r.lost.length === 0 &&
  r.notCompleted.length === 0 &&
  r.duplicateStepCompleted.length === 0 &&
  r.wrongSteps.length === 0 &&
  r.exits.length === 0 &&
  r.snapshots.every((s) => s.settled && s.split.length === 0);

function table(rows: Row[]): string {
  const head = [
    'instances',
    'workers',
    'runs',
    'completed',
    'lost',
    'dup StepCompleted',
    'split partitions',
    'moved (added, killed)',
    'seconds',
    'other exits',
    'ok',
  ];
  const body = rows.map(({ n, report: r, error }) =>
    r
      ? [
          `${n} -> ${n + 1} -> ${n}`,
          r.workers,
          r.runs,
          r.completed,
          r.lost.length,
          r.duplicateStepCompleted.length,
          r.snapshots.map((s) => `${s.phase}:${s.settled ? s.split.length : 'unsettled'}`).join(' '),
          r.snapshots
            .slice(1)
            .map((s) => s.moved)
            .join(', '),
          r.seconds.toFixed(1),
          r.exits.length,
          ok(r) ? 'yes' : 'NO',
        ]
      : [`${n}`, '', '', '', '', '', '', '', '', '', `NO: ${error}`],
  );
  const cells = [head, ...body].map((row) => row.map(String));
  const widths = head.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? '').length)));
  const line = (row: string[]) => `| ${row.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  return [
    line(cells[0]),
    `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`,
    ...cells.slice(1).map(line),
  ].join('\n');
}

async function main(): Promise<void> {
  const rows: Row[] = [];
  for (const n of opts.instances.split(',').map(Number)) {
    const t0 = Date.now();
    console.error(`--- ${n} orchestrator(s) + ${opts.workers} worker(s)`);
    try {
      const report = await runScaleScenario({
        label: `scale-matrix-${n}`,
        orchestrators: n,
        workers: Number(opts.workers),
        workflows: builtinWorkflows,
        partitions: Number(opts.partitions),
        runs: Number(opts.runs),
        sagas: Number(opts.sagas),
        sessionTimeoutMs: Number(opts.sessionTimeout),
        timeoutMs: Number(opts.timeout),
        log: (l) => console.error(`  ${((Date.now() - t0) / 1000).toFixed(1)}s ${l}`),
      });
      rows.push({ n, report });
      if (!ok(report))
        console.error(
          JSON.stringify({
            lost: report.lost.slice(0, 5),
            notCompleted: report.notCompleted.slice(0, 5),
            duplicateStepCompleted: report.duplicateStepCompleted.slice(0, 5),
            wrongSteps: report.wrongSteps.slice(0, 5),
            exits: report.exits,
            snapshots: report.snapshots,
          }),
        );
    } catch (e) {
      rows.push({ n, error: (e as Error).message.split('\n')[0] });
      console.error(e);
    }
  }
  console.log(table(rows));
  process.exitCode = rows.every((r) => r.report && ok(r.report)) ? 0 : 1;
}

void main();
