/**
 * `npm run chaos`: the full chaos suite, outside CI (libs/testing/src/scenarios/chaos.ts; the CI sample is
 * services/orchestrator/test/integration/chaos.int.spec.ts). Injects `--faults` faults at seeded random moments over
 * `--duration` seconds of mixed load (order sagas with declines, ETL maps, three-step runs), waits for every run to end, and prints the faults
 * by kind, runs completed, effects per logical step (counted in PostgreSQL), per-key order violations, lost runs,
 * trigger starts lost and doubled, and processes that exited by themselves. Exits non-zero on any lost run, unexpected
 * outcome, missing or duplicated effect, order violation, trigger start lost or doubled, or unexpected exit. Replay a failure with the printed seed.
 *
 *   eval "$(infra/local/stack.sh up)" && npm run chaos -- --faults 120 --duration 600 --seed 7
 */
import { Command } from 'commander';
import { FAULT_KINDS, runChaos, type ChaosReport } from '@keyflow/testing';

const opts = new Command()
  .option('--faults <n>', 'faults injected', '120')
  .option('--seed <n>', 'seed of the fault schedule and the load mix (default: random, printed)')
  .option('--duration <s>', 'seconds over which faults are injected and runs started', '600')
  .option('--rate <n>', 'runs started per second', '2')
  .option('--orchestrators <n>', 'orchestrator instances kept alive', '2')
  .option('--workers <n>', 'worker processes kept alive', '2')
  .option('--partitions <n>', 'partitions of the run-keyed and task topics', '6')
  .option('--settle <s>', 'deadline for every run to end after the last fault, in seconds', '300')
  .parse()
  .opts<Record<string, string | undefined>>();

const seed = opts.seed ? Number(opts.seed) : Math.floor(Math.random() * 2 ** 31);

export const chaosOk = (r: ChaosReport) =>
  r.runs.lost.length === 0 &&
  r.runs.unexpected.length === 0 &&
  r.runs.incompleteLifecycle.length === 0 &&
  r.effects.missing.length === 0 &&
  r.effects.duplicated.length === 0 &&
  r.order.violations.length === 0 &&
  r.triggerStarts.lost.length === 0 &&
  r.triggerStarts.doubled.length === 0 &&
  r.triggerStarts.notResumed.length === 0 &&
  r.exits.length === 0;

function print(r: ChaosReport, command: string): void {
  const list = (xs: string[]) => (xs.length ? `\n    ${xs.slice(0, 20).join('\n    ')}` : '');
  const injected = FAULT_KINDS.reduce((a, k) => a + r.faults[k].injected, 0);
  console.log(`chaos: ${command}`);
  console.log(`seed ${r.seed}, ${r.seconds.toFixed(0)} s`);
  console.log(`faults injected: ${injected}`);
  for (const k of FAULT_KINDS) {
    const f = r.faults[k];
    console.log(
      `  ${k.padEnd(18)} ${String(f.injected).padStart(4)}${f.skipped ? `  (${f.skipped} skipped: ${f.reason})` : ''}${f.failed ? `  (${f.failed} failed to inject)` : ''}`,
    );
  }
  console.log(
    `runs: ${r.runs.started} started (${r.runs.notStarted} could not be started: no instance answered), ${r.runs.completed} completed, ${r.runs.compensated} declined and compensated, ${r.runs.unexpected.length} other outcomes${list(r.runs.unexpected)}`,
  );
  console.log(`lost runs: ${r.runs.lost.length}${list(r.runs.lost)}`);
  console.log(
    `runs whose end the live wf.events reader missed (found by a second reader afterwards): ${r.runs.missedByLiveReader.length}${list(r.runs.missedByLiveReader)}`,
  );
  console.log(
    `runs whose lifecycle in wf.events has a gap or a repeat (read again after the faults): ${r.runs.incompleteLifecycle.length}${list(r.runs.incompleteLifecycle)}`,
  );
  console.log(
    `effects per logical step (PostgreSQL): ${r.effects.exactlyOnce} of ${r.effects.expected} exactly once, ${r.effects.missing.length} missing, ${r.effects.duplicated.length} executed more than once, ${r.effects.reexecutedAfterKill.length} re-executed after their worker was SIGKILLed mid-step${list([...r.effects.missing, ...r.effects.duplicated, ...r.effects.reexecutedAfterKill])}`,
  );
  console.log(
    `per-key order violations: ${r.order.violations.length} (${r.order.entities} keys checked)${list(r.order.violations)}`,
  );
  console.log(
    `poison records: ${r.poison.sent} sent, ${r.poison.deadLettered} dead-lettered (${r.poison.dlqRecords} DLQ records)`,
  );
  const t = r.triggerStarts;
  console.log(
    `trigger records: ${t.records}, runs started ${t.started}, starts lost ${t.lost.length}, starts doubled ${t.doubled.length}, not resumed after a trigger fault ${t.notResumed.length}${list([...t.lost, ...t.doubled, ...t.notResumed])}`,
  );
  console.log(`processes that exited by themselves: ${r.exits.length}${list(r.exits)}`);
  console.log(chaosOk(r) ? 'chaos: OK' : `chaos: FAILED (replay with --seed ${r.seed})`);
}

async function main(): Promise<void> {
  const command = `npm run chaos -- --faults ${opts.faults} --duration ${opts.duration} --rate ${opts.rate} --orchestrators ${opts.orchestrators} --workers ${opts.workers} --partitions ${opts.partitions} --seed ${seed}`;
  console.error(`seed ${seed}`);
  const t0 = Date.now();
  const report = await runChaos({
    label: 'chaos',
    seed,
    faults: Number(opts.faults),
    eachKindFirst: true,
    durationMs: Number(opts.duration) * 1000,
    runsPerSecond: Number(opts.rate),
    orchestrators: Number(opts.orchestrators),
    workers: Number(opts.workers),
    partitions: Number(opts.partitions),
    settleMs: Number(opts.settle) * 1000,
    log: (l) => console.error(`  ${((Date.now() - t0) / 1000).toFixed(1)}s ${l}`),
  });
  for (const line of report.timeline) console.error(`  ${line}`);
  print(report, command);
  process.exitCode = chaosOk(report) ? 0 : 1;
}

void main();
