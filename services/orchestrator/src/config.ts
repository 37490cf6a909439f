import { BlobConfigSchema } from '@keyflow/blobs';
import type { RegistryConnection } from '@keyflow/contracts';
import type { RedisConnection } from '@keyflow/idempotency';
import { z } from 'zod';
import { defaultGroupId, unsetWhenEmpty, type KafkaSecurity } from '@keyflow/kafka';
import {
  brokerList,
  CONNECTION_ENV,
  connectionSettingsFromEnv,
  DEFAULT_COMPLETION_TTL_MS,
} from '@keyflow/idempotency';
import { DEFAULT_PARKED_INPUTS_LIMIT, DEFAULT_SIGNAL_BUFFER_LIMIT } from '@keyflow/workflow';
import { CATCH_UP_MODES } from './engine/scheduler';
import { ApiKeysSchema, LOOPBACK_ADDRESS, type ApiKeyEntry } from './api/auth';
import { readFileSync } from 'node:fs';
import { SettingsError } from '@keyflow/errors';

/** Orchestrator configuration from the environment, validated at startup; every field is set after parsing. */
const Schema = z.object({
  ...CONNECTION_ENV,
  /** Consumer group of the engine; its transactional ids are `<group>-p<n>` (default: defaultGroupId). */
  ORCHESTRATOR_GROUP_ID: unsetWhenEmpty,
  /** Distinguishes instances: the read-model consumer group and the transactional ids' owner tag. */
  ORCHESTRATOR_INSTANCE_ID: z.string().min(1).default(`${process.pid}`),
  /** Port of the HTTP API (0: any free port; the "orchestrator ready" log line names the URL). */
  ORCHESTRATOR_HTTP_PORT: z.coerce.number().int().min(0).max(65535).default(0),
  /**
   * Address the HTTP API listens on (default loopback). Any other address needs API keys (KEYFLOW_API_KEYS or
   * KEYFLOW_API_KEYS_FILE) unless KEYFLOW_API_INSECURE=true says an unauthenticated API is meant.
   */
  ORCHESTRATOR_HTTP_HOST: z.string().min(1).default('127.0.0.1'),
  /**
   * API keys as JSON: [{"name": "ops", "key": "<at least 24 characters>", "scopes": ["read", "control"]}]. Set, every
   * route but /health, /metrics (see KEYFLOW_METRICS_AUTH), the webhook door, /docs and the console's static files
   * needs one (api/auth.ts).
   */
  KEYFLOW_API_KEYS: unsetWhenEmpty,
  /** A file holding the JSON of KEYFLOW_API_KEYS (a mounted secret); not both. */
  KEYFLOW_API_KEYS_FILE: unsetWhenEmpty,
  /** GET /metrics needs a key with the read scope too (default false: scrapers commonly have none). */
  KEYFLOW_METRICS_AUTH: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
  /** Allows an API without keys on a non-loopback address (a trusted network in front of it). */
  KEYFLOW_API_INSECURE: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
  /**
   * Names a request's Host header may give besides the listener's own address, localhost, 127.0.0.1, [::1] and
   * ORCHESTRATOR_HTTP_HOST (each with the listener's port), comma-separated: `name` (any port) or `name:port`, e.g.
   * the public name a proxy forwards. `*` turns the Host check off (the proxy checks it). Any other Host: 421
   * HOST_NOT_ALLOWED (api/cross-site.ts: DNS rebinding).
   */
  KEYFLOW_API_ALLOWED_HOSTS: z
    .string()
    .default('')
    .transform((v) =>
      v
        .split(',')
        .map((h) => h.trim().toLowerCase())
        .filter(Boolean),
    )
    .refine(
      (hosts) => hosts.every((h) => h === '*' || /^(\[[0-9a-f:.]+\]|[a-z0-9._~-]+)(:\d{1,5})?$/.test(h)),
      'comma-separated host names, each `name` or `name:port` ([v6] for IPv6), or `*`',
    ),
  /** Partitions of wf.requests, task.results, wf.events and wf.state (co-partitioned). */
  ORCHESTRATOR_PARTITIONS: z.coerce.number().int().min(1).default(6),
  /** Partitions of each task topic (`task.<type>`) the orchestrator creates; existing topics are not altered. */
  TASK_PARTITIONS: z.coerce.number().int().min(1).default(6),
  /** Session timeout of the engine's consumer group, in ms (heartbeats every fifth of it). */
  ORCHESTRATOR_SESSION_TIMEOUT_MS: z.coerce.number().int().min(6000).default(10_000),
  /** How often the engine looks for due timers (retry backoff, step and run timeouts, waits), in ms. */
  ORCHESTRATOR_TIMER_TICK_MS: z.coerce.number().int().min(10).default(200),
  /**
   * Longest the engine's fetch of wf.requests and task.results waits at the broker, in ms: a partition left out of
   * the fetch in flight (its batch still committing) waits up to this long for its next input, so it bounds per-step
   * latency; lower costs idle fetch requests (BENCHMARKS.md "Latency").
   */
  ORCHESTRATOR_FETCH_MAX_WAIT_MS: z.coerce.number().int().min(1).max(10_000).default(100),
  /**
   * How long a partition's take-overs and transactions may keep failing (retried with backoff, 500 ms doubling to
   * 15 s, full jitter) before the engine producer counts as failed for good: /health 503, then exit. A broker
   * restart or a leader election must fit in it.
   */
  ORCHESTRATOR_TAKEOVER_GIVE_UP_MS: z.coerce.number().int().min(1000).default(120_000),
  /**
   * How long a take-over waits for its barrier while the read model reads nothing of the partition, in ms: a catch-up
   * that keeps reading wf.state is waited for however long it takes; one that reads nothing for this long gives up and
   * the take-over is tried again (counted by ORCHESTRATOR_TAKEOVER_GIVE_UP_MS). docs/guarantees/time.md.
   */
  ORCHESTRATOR_CATCH_UP_STALL_MS: z.coerce.number().int().min(1000).default(60_000),
  /**
   * How long a run that ended (completed, failed, compensated, cancelled) is kept, in ms after it ended: then the
   * engine writes a tombstone for it to wf.state (compaction removes it) and every instance's read model and engine
   * forget it, so memory does not grow with every run ever started. After that, GET /runs/{id} answers 404, a retry
   * of a failed run is refused as unknown, and a late result for it is ignored. Default 72 h; 0 keeps runs forever.
   */
  ORCHESTRATOR_RUN_RETENTION_MS: z.coerce
    .number()
    .int()
    .min(0)
    .default(72 * 3600 * 1000),
  /**
   * Rest between two retention sweeps (looks for ended runs past ORCHESTRATOR_RUN_RETENTION_MS), in ms: a sweep starts
   * this long after the previous one ended, never while one runs (docs/guarantees/time.md).
   */
  ORCHESTRATOR_RETENTION_SWEEP_MS: z.coerce.number().int().min(100).default(60_000),
  /**
   * How long an owned partition's input batch may wait without being committed before /health answers `degraded`
   * naming the partition (`PARTITION_STALLED`), in ms (docs/guarantees/time.md). Degraded, not failed: a restart
   * would meet the same wait (a long catch-up, a slow store).
   */
  ORCHESTRATOR_PARTITION_STALL_MS: z.coerce.number().int().min(1000).default(30_000),
  /**
   * Longest the engine's stop (SIGTERM, SIGINT, app.close()) waits for the retention sweep in progress, the batches in
   * flight and its producers, in ms; then it gives up on them (Kafka aborts what was not committed) and the process
   * exits (docs/guarantees/time.md).
   */
  ORCHESTRATOR_STOP_TIMEOUT_MS: z.coerce.number().int().min(1000).default(10_000),
  /**
   * Local steps' handler calls running at once in this instance (docs/workflows.md "Local steps"); more wait, their
   * leases held, for a slot. They share the engine's event loop: keep it small.
   */
  ORCHESTRATOR_LOCAL_STEP_CONCURRENCY: z.coerce.number().int().min(1).default(16),
  /**
   * A local step's idempotency lease, in ms (renewed while its handler runs): after a crash, another instance can run
   * the step only once it has lapsed, so keep it near the local steps' step timeouts.
   */
  ORCHESTRATOR_LOCAL_STEP_LEASE_MS: z.coerce.number().int().min(300).default(10_000),
  /** How long a local step's completion record answers a replay, in ms (as WORKER_COMPLETION_TTL_MS). */
  ORCHESTRATOR_LOCAL_STEP_COMPLETION_TTL_MS: z.coerce
    .number()
    .int()
    .min(1000)
    .default(DEFAULT_COMPLETION_TTL_MS),
  /**
   * The least time (ms) an Idempotency-Key stays bound to its first request (a start's run, a signal's, cancel's or
   * retry's answer). The TTL used is never below ORCHESTRATOR_RUN_RETENTION_MS: see {@link requestKeyTtlMs}.
   * Default 24 h.
   */
  IDEMPOTENCY_KEY_TTL_MS: z.coerce.number().int().min(1000).default(86_400_000),
  /** Serves POST /webhooks/:workflow. With it on, WEBHOOK_SECRETS must name at least one workflow. */
  WEBHOOKS_ENABLED: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
  /**
   * Standard Webhooks secrets per workflow, as JSON: {"<workflow>": "whsec_<base64 key>"}. A delivery is verified
   * with its own workflow's secret only, so a signature for one workflow never starts another.
   */
  WEBHOOK_SECRETS: z
    .string()
    .default('{}')
    .transform((v, ctx) => {
      try {
        const o: unknown = JSON.parse(v);
        const r = z
          .record(z.string().regex(/^(whsec_)?[A-Za-z0-9+/]+={0,2}$/, 'whsec_<base64>'))
          .safeParse(o);
        if (r.success) return r.data;
        ctx.addIssue({
          code: 'custom',
          message: `a JSON object {"<workflow>": "whsec_<base64>"}: ${r.error.issues[0].message}`,
        });
      } catch {
        ctx.addIssue({ code: 'custom', message: 'a JSON object {"<workflow>": "whsec_<base64>"}, not JSON' });
      }
      return z.NEVER;
    }),
  /**
   * Replaced by WEBHOOK_SECRETS (Standard Webhooks, per workflow): refused when set, see docs/workflows.md
   * "Webhooks".
   */
  WEBHOOK_SECRET: z
    .string()
    .optional()
    .refine(
      (v) => v === undefined,
      'replaced by WEBHOOK_SECRETS (Standard Webhooks, one secret per workflow); see docs/workflows.md "Webhooks"',
    ),
  /** Distinct signals a run may hold buffered (sent while it does not wait for them); past it: 429 / rejected. */
  ORCHESTRATOR_SIGNAL_BUFFER_LIMIT: z.coerce.number().int().min(1).default(DEFAULT_SIGNAL_BUFFER_LIMIT),
  /**
   * Inputs a run may hold parked (kept, in order, while the owning instance does not have the run's workflow
   * version: a rolling deploy); past it an input goes to its topic's DLQ as PARKED_INPUTS_FULL, to be redriven.
   */
  ORCHESTRATOR_PARKED_INPUTS_LIMIT: z.coerce.number().int().min(1).default(DEFAULT_PARKED_INPUTS_LIMIT),
  /** Fires missed while no instance ran, started at startup: skip, once (the latest) or all (at most the max). */
  SCHEDULE_CATCH_UP: z.enum(CATCH_UP_MODES).default('all'),
  /** How far back (ms) missed fires are looked for at startup. */
  SCHEDULE_CATCH_UP_WINDOW_MS: z.coerce.number().int().min(0).default(60_000),
  /** `all`: at most this many missed fires per schedule (the latest ones). */
  SCHEDULE_CATCH_UP_MAX: z.coerce.number().int().min(1).default(100),
  /** How often (ms) the lag monitor sets consumer_lag_records, consumer_oldest_unread_age_seconds, dlq_records; 0: off. */
  ORCHESTRATOR_LAG_INTERVAL_MS: z.coerce.number().int().min(0).default(30_000),
  /** Consumer groups the lag monitor measures (comma-separated); default: this orchestrator's and the workers'. */
  ORCHESTRATOR_LAG_GROUPS: z.string().optional(),
  /** The workers' group id (the workers' WORKER_GROUP_ID), for the default of ORCHESTRATOR_LAG_GROUPS. */
  WORKER_GROUP_ID: unsetWhenEmpty,
  /** Blob store and size limits (libs/blobs config.ts). */
  ...BlobConfigSchema,
});

/**
 * How long the API keeps an Idempotency-Key (ms): IDEMPOTENCY_KEY_TTL_MS, raised to ORCHESTRATOR_RUN_RETENTION_MS,
 * so a client's retry is answered alike for as long as its run can be read (72 h by default). With retention 0
 * (runs kept for ever) it is IDEMPOTENCY_KEY_TTL_MS: the engine still applies a request id once per run
 * (`RunState.requestIds`) and a keyed start once per run id. The one place this is decided.
 */
export const requestKeyTtlMs = (
  cfg: Pick<OrchestratorConfig, 'IDEMPOTENCY_KEY_TTL_MS' | 'ORCHESTRATOR_RUN_RETENTION_MS'>,
) => Math.max(cfg.IDEMPOTENCY_KEY_TTL_MS, cfg.ORCHESTRATOR_RUN_RETENTION_MS);

/** The groups the lag monitor measures (ORCHESTRATOR_LAG_GROUPS, or the orchestrator's and the workers'). */
export const lagGroups = (cfg: OrchestratorConfig) =>
  cfg.ORCHESTRATOR_LAG_GROUPS?.split(',')
    .map((g) => g.trim())
    .filter(Boolean) ?? [cfg.ORCHESTRATOR_GROUP_ID, cfg.WORKER_GROUP_ID];

export type OrchestratorConfig = Omit<z.infer<typeof Schema>, 'ORCHESTRATOR_GROUP_ID' | 'WORKER_GROUP_ID'> & {
  ORCHESTRATOR_GROUP_ID: string;
  WORKER_GROUP_ID: string;
  brokers: string[];
  kafkaSecurity: KafkaSecurity;
  registry: RegistryConnection;
  /** Undefined without REDIS_URL (requireApiSettings refuses that). */
  redis?: RedisConnection;
};

export class OrchestratorConfigError extends SettingsError {
  readonly code = 'ORCHESTRATOR_CONFIG';
  constructor(issues: string[]) {
    super('orchestrator configuration', issues);
  }
}

export function loadOrchestratorConfig(env: NodeJS.ProcessEnv = process.env): OrchestratorConfig {
  const parsed = Schema.safeParse(env);
  if (!parsed.success)
    throw new OrchestratorConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`));
  const connections = connectionSettingsFromEnv(env, parsed.data.REDIS_URL || undefined);
  if ('issues' in connections) throw new OrchestratorConfigError(connections.issues);
  const prefix = parsed.data.KEYFLOW_TOPIC_PREFIX;
  return {
    ...parsed.data,
    ORCHESTRATOR_GROUP_ID: parsed.data.ORCHESTRATOR_GROUP_ID ?? defaultGroupId('orchestrator', prefix),
    WORKER_GROUP_ID: parsed.data.WORKER_GROUP_ID ?? defaultGroupId('workers', prefix),
    ...connections,
    brokers: brokerList(parsed.data.KAFKA_BROKERS),
  };
}

/**
 * Settings the HTTP API cannot serve without: REDIS_URL; with WEBHOOKS_ENABLED at least one webhook secret; valid API
 * keys when given (KEYFLOW_API_KEYS or KEYFLOW_API_KEYS_FILE, not both), and some when the API listens beyond
 * loopback (unless KEYFLOW_API_INSECURE). Returns the config with `apiKeys` (empty: authentication off).
 * @throws OrchestratorConfigError naming each missing or invalid setting.
 */
export function requireApiSettings(
  cfg: OrchestratorConfig,
): OrchestratorConfig & { REDIS_URL: string; redis: RedisConnection; apiKeys: ApiKeyEntry[] } {
  const issues: string[] = [];
  if (!cfg.REDIS_URL)
    issues.push('REDIS_URL: required (the API keeps Idempotency-Keys and webhook delivery ids in Redis)');
  if (cfg.WEBHOOKS_ENABLED && Object.keys(cfg.WEBHOOK_SECRETS).length === 0)
    issues.push('WEBHOOK_SECRETS: WEBHOOKS_ENABLED=true needs a secret for at least one workflow');
  let apiKeys: ApiKeyEntry[] = [];
  const from = cfg.KEYFLOW_API_KEYS_FILE ? 'KEYFLOW_API_KEYS_FILE' : 'KEYFLOW_API_KEYS';
  if (cfg.KEYFLOW_API_KEYS !== undefined && cfg.KEYFLOW_API_KEYS_FILE !== undefined)
    issues.push('KEYFLOW_API_KEYS and KEYFLOW_API_KEYS_FILE: give one of them');
  else {
    let text: string | undefined = cfg.KEYFLOW_API_KEYS;
    if (cfg.KEYFLOW_API_KEYS_FILE !== undefined)
      try {
        text = readFileSync(cfg.KEYFLOW_API_KEYS_FILE, 'utf8');
      } catch (e) {
        issues.push(
          `KEYFLOW_API_KEYS_FILE: cannot read ${cfg.KEYFLOW_API_KEYS_FILE}: ${(e as Error).message}`,
        );
      }
    if (text !== undefined) {
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        issues.push(`${from}: not JSON (a list of {"name", "key", "scopes"})`);
      }
      if (json !== undefined) {
        const r = ApiKeysSchema.safeParse(json);
        if (r.success) apiKeys = r.data;
        // Only where and what kind: zod's own wording can repeat a value, which might be a key pasted by mistake.
        else
          issues.push(
            ...r.error.issues.map(
              (i) =>
                `${from}: ${i.path.join('.') || '(root)'}: ${
                  i.code === 'invalid_enum_value'
                    ? 'one of read, control'
                    : i.code === 'unrecognized_keys'
                      ? 'unknown field (name, key and scopes only)'
                      : i.message
                }`,
            ),
          );
      }
    }
  }
  if (
    apiKeys.length === 0 &&
    !issues.some((i) => i.startsWith('KEYFLOW_API_KEYS')) &&
    !LOOPBACK_ADDRESS.test(cfg.ORCHESTRATOR_HTTP_HOST) &&
    !cfg.KEYFLOW_API_INSECURE
  )
    issues.push(
      `ORCHESTRATOR_HTTP_HOST=${cfg.ORCHESTRATOR_HTTP_HOST}: an API reachable from other machines needs API keys ` +
        '(KEYFLOW_API_KEYS or KEYFLOW_API_KEYS_FILE), or KEYFLOW_API_INSECURE=true',
    );
  if (
    cfg.KEYFLOW_METRICS_AUTH &&
    apiKeys.length === 0 &&
    !issues.some((i) => i.startsWith('KEYFLOW_API_KEYS'))
  )
    issues.push('KEYFLOW_METRICS_AUTH=true: needs API keys (KEYFLOW_API_KEYS or KEYFLOW_API_KEYS_FILE)');
  if (issues.length) throw new OrchestratorConfigError(issues);
  return { ...(cfg as OrchestratorConfig & { REDIS_URL: string; redis: RedisConnection }), apiKeys };
}

/**
 * The orchestrator's settings schema (zod, keyed by environment variable name), for the generated configuration
 * reference (tools/docs, `npm run docs:config`): each setting's JSDoc above is its description there.
 */
export const OrchestratorSettingsSchema = Schema;
