import { Command, Option } from 'commander';
import {
  COMPENSATION_SUFFIX,
  itemOf,
  RUN_STATUSES,
  type ChildRun,
  type RunState,
  type StepState,
} from '@keyflow/workflow';
import { api } from '../api';
import type { CliContext } from '../context';
import { opt } from '../options';
import { duration, iso, print, table } from '../output';

type Summary = {
  runId: string;
  workflow: string;
  version: number;
  status: string;
  startedAt: number;
  endedAt: number | null;
};

/** The rows `runs show` prints for a run's steps: the plan's steps (map items summed up), then compensations. */
export function stepRows(run: RunState): Array<Record<string, unknown>> {
  const ids = [...run.plan, ...Object.keys(run.steps).filter((id) => id.endsWith(COMPENSATION_SUFFIX))];
  // The run API lists map items among the steps (`<map>[<index>]`): failed ones, counted per map in one pass.
  const failedItems = new Map<string, number>();
  for (const [id, st] of Object.entries(run.steps)) {
    const mapId = itemOf(id)?.mapId;
    if (mapId && st.status === 'failed') failedItems.set(mapId, (failedItems.get(mapId) ?? 0) + 1);
  }
  return ids
    .filter((id) => run.steps[id])
    .map((id) => {
      const st: StepState = run.steps[id];
      const failed = failedItems.get(id) ?? 0;
      return {
        step: id,
        status: st.status,
        attempts: st.attempt,
        took: duration(
          st.endedAt !== undefined && st.startedAt !== undefined ? st.endedAt - st.startedAt : null,
        ),
        items: st.map ? `${st.map.done}/${st.map.total} done${failed ? `, ${failed} failed` : ''}` : '',
        error: st.error ? `${st.error.errorClass}: ${st.error.message}` : '',
      };
    });
}

export function showRun(run: RunState & { children?: ChildRun[] }): string {
  const took =
    run.endedAt !== undefined
      ? duration(run.endedAt - run.startedAt)
      : `running for ${duration(Date.now() - run.startedAt)}`;
  const lines = [
    `run ${run.runId}  ${run.workflow} v${run.version}  ${run.status}  started ${iso(run.startedAt)}  ${took}`,
    '',
    table(stepRows(run)),
  ];
  if (run.parent)
    lines.splice(
      1,
      0,
      `parent ${run.parent.runId} (step ${run.parent.stepId}, attempt ${run.parent.attempt})`,
    );
  if (run.children?.length)
    lines.push(
      '',
      'children:',
      table(run.children.map((c) => ({ step: c.stepId, attempt: c.attempt, run: c.runId }))),
    );
  if (run.error)
    lines.push('', `error at ${run.error.stepId}: ${run.error.errorClass}: ${run.error.message}`);
  if (run.compensation)
    lines.push(
      '',
      `compensation after ${run.compensation.failedStepId}: ${run.compensation.queue.map((s) => `${s}.compensate`).join(' -> ')} (${run.compensation.index}/${run.compensation.queue.length} done)`,
    );
  lines.push(
    '',
    'timeline:',
    table(
      run.timeline.map((t) => ({
        at: iso(t.at),
        '+': duration(t.at - run.startedAt),
        event: t.event,
        step: t.stepId ?? '',
        attempt: t.attempt ?? '',
        detail: t.detail ?? '',
      })),
    ),
  );
  return lines.join('\n');
}

/** `keyflow runs ...`: the orchestrator's run API. */
export function runsCommand(ctx: CliContext): Command {
  const runs = new Command('runs').description(
    "runs through the orchestrator's API (--api or KEYFLOW_API_URL)",
  );
  addLs(runs, ctx);
  addShow(runs, ctx);
  addStart(runs, ctx);
  addControls(runs, ctx);
  return runs;
}

/** The `--api` option every `runs` subcommand takes. */
const apiOption = () => new Option('--api <url>', 'orchestrator API URL (default: KEYFLOW_API_URL)');

/** `keyflow runs ls`: a page of runs, newest first. */
function addLs(runs: Command, ctx: CliContext): void {
  runs
    .command('ls')
    .description('list runs, newest first, a page at a time (--limit, then --cursor)')
    .addOption(apiOption())
    .option('--workflow <name>', 'only runs of this workflow')
    .addOption(new Option('--status <status>', 'only runs in this status').choices(RUN_STATUSES))
    .option('--from <time>', 'started at or after (ms, ISO-8601, or 15m/2h/7d ago)', opt.time)
    .option('--to <time>', 'started before', opt.time)
    .option('--limit <n>', 'runs at most (1-500)', '50')
    .option(
      '--cursor <cursor>',
      "the next page: the previous page's `next` (printed as --cursor when there is more)",
    )
    .option('--json', 'JSON output')
    .action(async (o) => {
      const q = new URLSearchParams();
      for (const k of ['workflow', 'status', 'from', 'to', 'limit', 'cursor'] as const)
        if (o[k] !== undefined) q.set(k, String(o[k]));
      const page = await api<{ runs: Summary[]; next: string | null }>(
        ctx.endpoint(o.api),
        'GET',
        `/runs?${q}`,
      );
      print(
        page,
        o.json,
        (p) =>
          table(
            p.runs.map((r) => ({
              run: r.runId,
              workflow: `${r.workflow} v${r.version}`,
              status: r.status,
              started: iso(r.startedAt),
              took: r.endedAt !== null ? duration(r.endedAt - r.startedAt) : '-',
            })),
          ) + (p.next ? `\n(more: --cursor ${p.next})` : ''),
      );
    });
}

/** `keyflow runs show <runId>`: one run with its steps, compensation and timeline. */
function addShow(runs: Command, ctx: CliContext): void {
  runs
    .command('show <runId>')
    .description('a run: steps with attempts, durations and errors, compensation, timeline')
    .addOption(apiOption())
    .option('--json', 'JSON output (the run as GET /runs/:id gives it)')
    .action(async (runId: string, o) => {
      const run = await api<RunState>(ctx.endpoint(o.api), 'GET', `/runs/${encodeURIComponent(runId)}`);
      print(run, o.json, showRun);
    });
}

/** `keyflow runs start <workflow>`: starts a run. */
function addStart(runs: Command, ctx: CliContext): void {
  runs
    .command('start <workflow>')
    .description('start a run (202: accepted; it runs asynchronously)')
    .addOption(apiOption())
    .option('--input <json>', 'run input (a JSON object)', opt.json, {})
    .option('--version <n>', 'workflow version (default: the latest)')
    .option('--business-key <key>', 'business key (default: the run id)')
    .option('--run-id <id>', 'run id (default: generated)')
    .option(
      '--idempotency-key <key>',
      'Idempotency-Key: a retry with the same key and body starts no second run',
    )
    .option('--json', 'JSON output')
    .action(async (workflow: string, o) => {
      const res = await api<{ runId: string }>(
        ctx.endpoint(o.api),
        'POST',
        '/runs',
        {
          workflow,
          input: o.input,
          ...(o.version ? { version: Number(o.version) } : {}),
          ...(o.businessKey ? { businessKey: o.businessKey } : {}),
          ...(o.runId ? { runId: o.runId } : {}),
        },
        o.idempotencyKey ? { 'Idempotency-Key': o.idempotencyKey } : {},
      );
      print(res, o.json, (r) => `started ${r.runId}`);
    });
}

/** The request's Idempotency-Key header, when --idempotency-key is given. */
const keyed = (o: { idempotencyKey?: string }): Record<string, string> =>
  o.idempotencyKey ? { 'Idempotency-Key': o.idempotencyKey } : {};

/** `keyflow runs cancel|terminate|signal|retry`: requests to a run, each with an optional Idempotency-Key. */
function addControls(runs: Command, ctx: CliContext): void {
  const control = (name: string, description: string) =>
    runs
      .command(name)
      .description(description)
      .addOption(apiOption())
      .option(
        '--idempotency-key <key>',
        'Idempotency-Key: the same request again with the same key gets the first answer and is applied once',
      )
      .option('--json', 'JSON output');
  /** POSTs `body` to the run's `action` and prints `done` (or the answer as JSON). */
  const post = async (
    o: { api?: string; json?: boolean; idempotencyKey?: string },
    runId: string,
    action: string,
    body: object,
    done: string,
  ) => {
    const res = await api(
      ctx.endpoint(o.api),
      'POST',
      `/runs/${encodeURIComponent(runId)}/${action}`,
      body,
      keyed(o),
    );
    print(res, o.json, () => done);
  };
  control('cancel <runId>', 'cancel a run: it stops, and its completed steps are compensated')
    .option('--reason <text>', 'recorded with RunCancelled', 'cancelled with the keyflow CLI')
    .action((runId: string, o) =>
      post(o, runId, 'cancel', { reason: o.reason }, `cancel of ${runId} accepted`),
    );
  control(
    'terminate <runId>',
    'terminate a run: it stops at once, nothing is compensated (recorded as terminated)',
  )
    .option('--reason <text>', 'recorded with RunCancelled', 'terminated with the keyflow CLI')
    .action((runId: string, o) =>
      post(o, runId, 'terminate', { reason: o.reason }, `terminate of ${runId} accepted`),
    );
  control('signal <runId> <signal>', 'send a signal to a run (a wait step takes it, or it is buffered)')
    .option('--payload <json>', 'signal payload (JSON)', opt.json)
    .action((runId: string, signal: string, o) =>
      post(
        o,
        runId,
        'signal',
        { signal, ...(o.payload !== undefined ? { payload: o.payload } : {}) },
        `signal ${signal} to ${runId} accepted`,
      ),
    );
  control('retry <runId>', 'retry a failed run from its failed step (or --from-step)')
    .option('--from-step <stepId>', 'step to re-run from (at or before the failed one)')
    .action((runId: string, o) =>
      post(
        o,
        runId,
        'retry',
        { ...(o.fromStep ? { fromStepId: o.fromStep } : {}) },
        `retry of ${runId} accepted`,
      ),
    );
}
