import { resolve } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import type { WorkflowDefinition } from '@keyflow/workflow';
import type { CliContext } from '../context';
import { print } from '../output';

/** The definitions a module exports: `workflows` (an array), or a default export that is one. */
export function definitionsOf(modulePath: string): WorkflowDefinition[] {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const mod = require(resolve(modulePath)) as { workflows?: unknown; default?: unknown };
  const defs = mod.workflows ?? mod.default;
  if (!Array.isArray(defs) || defs.some((d) => typeof d?.name !== 'string' || !(d?.stepIndex instanceof Map)))
    throw new InvalidArgumentError(
      `${modulePath} must export \`workflows\` (or a default export): an array of built definitions (workflow(...).build())`,
    );
  return defs as WorkflowDefinition[];
}

/** `keyflow rebuild`: every run rebuilt from the input topics, compared with the live state on wf.state. */
export function rebuildCommand(ctx: CliContext): Command {
  return new Command('rebuild')
    .description(
      'rebuild every run from wf.requests and task.results with the definitions and compare with wf.state ' +
        "(exit 0: they agree, 2: they differ); reads the orchestrator's environment",
    )
    .option(
      '--definitions <module...>',
      'modules exporting `workflows`: the definitions of the runs (the orchestrator has no built-in ones)',
    )
    .option('--max-differences <n>', 'differences to print', '20')
    .option('--json', 'JSON output')
    .action(async (o) => {
      // Loaded here, not with the CLI: the orchestrator's package brings NestJS with it (about 0.35 s of every
      // `keyflow` command's start when imported at the top).
      /* eslint-disable @typescript-eslint/no-require-imports */
      const { claimCheckFromConfig } = require('@keyflow/blobs') as typeof import('@keyflow/blobs');
      const { loadOrchestratorConfig, rebuildRuns, WorkflowRegistry } =
        require('@keyflow/orchestrator') as typeof import('@keyflow/orchestrator');
      /* eslint-enable @typescript-eslint/no-require-imports */
      const cfg = loadOrchestratorConfig();
      const registry = new WorkflowRegistry().register(
        ...((o.definitions as string[] | undefined) ?? []).flatMap(definitionsOf),
      );
      const report = await rebuildRuns(ctx.kafka, ctx.codec!, registry, claimCheckFromConfig(cfg), {
        signalBufferLimit: cfg.ORCHESTRATOR_SIGNAL_BUFFER_LIMIT,
      });
      const shown = {
        ...report,
        differences: report.differences.slice(0, Number(o.maxDifferences)),
        differenceCount: report.differences.length,
      };
      print(shown, o.json, (r) =>
        [
          `runs: ${r.runsLive} live, ${r.runsRebuilt} rebuilt from ${r.inputsRead} inputs, ${r.matching} matching`,
          ...(r.unrebuildable.length ? [`not rebuildable (no definition): ${r.unrebuildable.length}`] : []),
          ...r.differences.map(
            (d) =>
              `  ${d.runId} ${d.field}: live ${JSON.stringify(d.live)} rebuilt ${JSON.stringify(d.rebuilt)}`,
          ),
        ].join('\n'),
      );
      process.exitCode = report.differences.length ? 2 : 0;
    });
}
