import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { CliContext } from './context';
import { errorLine, terminalSafe } from './output';
import { dlqCommand } from './commands/dlq';
import { groupsCommand } from './commands/groups';
import { rebuildCommand } from './commands/rebuild';
import { replayCommand } from './commands/replay';
import { runsCommand } from './commands/runs';

/**
 * `keyflow`: one CLI for operators and scripts (docs/operating.md). Reads KAFKA_BROKERS,
 * SCHEMA_REGISTRY_URL, KEYFLOW_TOPIC_PREFIX and KEYFLOW_API_URL from the environment; `--json` on every command for
 * scripts. Exit codes: 0 done, 1 an error (its message on stderr), 2 a usage error or (rebuild) differences found.
 */
export function program(ctx = new CliContext()): Command {
  const root = new Command('keyflow')
    .description('operate keyflow: runs, DLQs, consumer groups, lag and replay, rebuild')
    .showHelpAfterError()
    .addCommand(runsCommand(ctx))
    .addCommand(dlqCommand(ctx))
    .addCommand(groupsCommand(ctx))
    .addCommand(replayCommand(ctx))
    .addCommand(rebuildCommand(ctx));
  // Usage errors of every command (addCommand passes no settings down) come to the catch below as CommanderError,
  // exit 2, instead of commander's own process.exit(1).
  // Commander's own messages (usage errors, help) echo arguments: their control characters are escaped too.
  const safe = (write: (s: string) => unknown) => (s: string) =>
    void write(terminalSafe(s, { keepNewlines: true }));
  const override = (c: Command): void => {
    c.exitOverride();
    c.configureOutput({
      writeOut: safe((s) => process.stdout.write(s)),
      writeErr: safe((s) => process.stderr.write(s)),
    });
    c.commands.forEach(override);
  };
  override(root);
  return root;
}

if (
  require.main === module ||
  process.argv[1]?.endsWith('keyflow.js') ||
  process.argv[1]?.endsWith('keyflow')
)
  program()
    .parseAsync()
    .then(
      () => process.exit(process.exitCode ?? 0),
      (e: unknown) => {
        // Commander already printed its usage errors (and help or the version, which exit 0).
        if (e instanceof CommanderError) process.exit(e.exitCode === 0 ? 0 : 2);
        // The message may carry a value (a topic, a key, an API answer): its control characters are escaped.
        process.stderr.write(errorLine(e));
        process.exit(e instanceof InvalidArgumentError ? 2 : 1);
      },
    );
