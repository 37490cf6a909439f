import { claimCheckFromConfig } from '@keyflow/blobs';
import { Command } from 'commander';
import { EventCodec } from '@keyflow/contracts';
import { createKafka } from '@keyflow/kafka';
import { createLogger } from '@keyflow/observability';
import { loadOrchestratorConfig } from './config';
import { rebuildRuns } from './rebuild';
import { builtinWorkflows, WorkflowRegistry } from './workflows/registry';

/**
 * `npm run -w @keyflow/orchestrator rebuild [-- --max-differences 20]`: rebuilds every run from the input topics
 * and prints how it compares with the live state. Exit 0 when they agree, 2 when they differ.
 */
const opts = new Command('rebuild')
  .option('--max-differences <n>', 'differences to print', '20')
  .parse()
  .opts<{ maxDifferences: string }>();

async function main() {
  const cfg = loadOrchestratorConfig();
  const logger = createLogger('rebuild');
  const kafka = createKafka({ brokers: cfg.brokers, clientId: 'keyflow-rebuild', logger });
  const codec = new EventCodec({
    registryUrl: cfg.SCHEMA_REGISTRY_URL,
    topicPrefix: cfg.KEYFLOW_TOPIC_PREFIX,
  });
  const report = await rebuildRuns(
    kafka,
    codec,
    new WorkflowRegistry().register(...builtinWorkflows),
    claimCheckFromConfig(cfg),
    { signalBufferLimit: cfg.ORCHESTRATOR_SIGNAL_BUFFER_LIMIT },
  );
  console.log(
    JSON.stringify(
      {
        ...report,
        differences: report.differences.slice(0, Number(opts.maxDifferences)),
        differenceCount: report.differences.length,
      },
      null,
      2,
    ),
  );
  process.exit(report.differences.length ? 2 : 0);
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
