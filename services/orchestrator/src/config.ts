import { BlobConfigSchema } from '@keyflow/blobs';
import { z } from 'zod';

/** Orchestrator configuration from the environment, validated at startup; every field is set after parsing. */
const Schema = z.object({
  KAFKA_BROKERS: z.string().min(1, 'comma-separated host:port list'),
  SCHEMA_REGISTRY_URL: z.string().url(),
  KEYFLOW_TOPIC_PREFIX: z.string().default(''),
  ORCHESTRATOR_GROUP_ID: z.string().min(1).default('keyflow.orchestrator'),
  /** Distinguishes instances: the read-model consumer group and the transactional ids' owner tag. */
  ORCHESTRATOR_INSTANCE_ID: z.string().min(1).default(`${process.pid}`),
  ORCHESTRATOR_HTTP_PORT: z.coerce.number().int().min(0).max(65535).default(0),
  /** Partitions of wf.requests, task.results, wf.events and wf.state (co-partitioned). */
  ORCHESTRATOR_PARTITIONS: z.coerce.number().int().min(1).default(6),
  TASK_PARTITIONS: z.coerce.number().int().min(1).default(6),
  ORCHESTRATOR_SESSION_TIMEOUT_MS: z.coerce.number().int().min(6000).default(10_000),
  ORCHESTRATOR_TIMER_TICK_MS: z.coerce.number().int().min(10).default(200),
  /**
   * How long a partition's take-overs and transactions may keep failing (retried with backoff, 500 ms doubling to
   * 15 s, full jitter) before the engine producer counts as failed for good: /health 503, then exit. A broker
   * restart or a leader election must fit in it.
   */
  ORCHESTRATOR_TAKEOVER_GIVE_UP_MS: z.coerce.number().int().min(1000).default(120_000),
  /** Secret for webhook HMAC-SHA256 signatures (X-Keyflow-Signature: sha256=<hex>). */
  WEBHOOK_SECRET: z.string().default(''),
  /** Blob store and size limits (libs/blobs config.ts). */
  ...BlobConfigSchema,
});

export type OrchestratorConfig = z.infer<typeof Schema> & { brokers: string[] };

export class OrchestratorConfigError extends Error {
  readonly retryable = false;
  constructor(issues: string[]) {
    super(`invalid orchestrator configuration:\n${issues.map((i) => `  - ${i}`).join('\n')}`);
    this.name = 'OrchestratorConfigError';
  }
}

export function loadOrchestratorConfig(env: NodeJS.ProcessEnv = process.env): OrchestratorConfig {
  const parsed = Schema.safeParse(env);
  if (!parsed.success)
    throw new OrchestratorConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`));
  return {
    ...parsed.data,
    brokers: parsed.data.KAFKA_BROKERS.split(',')
      .map((b) => b.trim())
      .filter(Boolean),
  };
}
