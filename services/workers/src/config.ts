import { BlobConfigSchema } from '@keyflow/blobs';
import type { RegistryConnection } from '@keyflow/contracts';
import { DEFAULT_COMPLETION_TTL_MS, type RedisConnection } from '@keyflow/idempotency';
import { z } from 'zod';
import { defaultGroupId, blankAsUnset, unsetWhenEmpty, type KafkaSecurity } from '@keyflow/kafka';
import { brokerList, CONNECTION_ENV, connectionSettingsFromEnv } from '@keyflow/idempotency';
import { SettingsError } from '@keyflow/errors';

/** One task type's flow limits (see FlowLimit). */
const FlowLimitsSchema = z.record(
  z.string(),
  z.strictObject({
    concurrency: z.number().int().min(0).optional(),
    perKey: z.number().int().min(0).optional(),
    keyField: z.string().min(1).optional(),
    ratePerSec: z.number().min(0).optional(),
  }),
);

/**
 * Worker configuration from the environment, validated at startup. Every field is set after parsing
 * (defaults applied), so nothing downstream sees an optional value.
 */
const Schema = z.object({
  ...CONNECTION_ENV,
  /** Redis the worker keeps idempotency records, leases and fences in (`redis://` or `rediss://`); see docs/guarantees/idempotency-store.md. */
  REDIS_URL: CONNECTION_ENV.REDIS_URL.unwrap(),
  /** Consumer group of the task topics (default: defaultGroupId, `<KEYFLOW_TOPIC_PREFIX>keyflow.workers`). */
  WORKER_GROUP_ID: unsetWhenEmpty,
  /** Task types to consume (comma-separated); default: every registered handler. */
  WORKER_TASK_TYPES: z.string().default(''),
  /** Port of /health and /metrics (0: any free port; the ready log line names it). */
  WORKER_HTTP_PORT: z.coerce.number().int().min(0).max(65535).default(0),
  /**
   * Commands dispatched and not yet answered, per process: waiting for a handler slot, running, or waiting for their
   * completion record and result to be acknowledged. Bounds the commands and results held in memory (at most this
   * many results, each under half of max.message.bytes) and the leases held. Deep enough that the Redis and produce
   * round trips do not set the pace (BENCHMARKS.md "Workers", 2026-12-03 08:00-08:20 UTC). Unset: 512.
   */
  WORKER_MAX_IN_FLIGHT: z.coerce.number().int().min(1).optional(),
  /**
   * The same, per partition: how deep one partition's pipeline is (its begin calls, handlers, completion records and
   * results in flight at once). Unset: the handler slots, at most 128.
   */
  WORKER_MAX_IN_FLIGHT_PER_PARTITION: blankAsUnset(z.coerce.number().int().min(1)),
  /**
   * Handler calls running at once for the tasks of one partition. Kept below WORKER_MAX_CONCURRENT_HANDLERS, so that a
   * partition whose handlers hang never holds every handler slot (the worker warns at startup when it does not).
   * Unset: WORKER_MAX_IN_FLIGHT_PER_PARTITION when that is set (it bounded them before this setting existed), else half
   * the handler slots (at least 1, at most 64).
   */
  WORKER_MAX_HANDLERS_PER_PARTITION: blankAsUnset(z.coerce.number().int().min(1)),
  /**
   * Handler calls running at once, per process (what downstream systems see). A task waiting for a slot holds its
   * lease, and its attempt timeout starts when its handler does. Unset: WORKER_MAX_IN_FLIGHT when that is set (it
   * bounded handlers before this setting existed), else 128.
   */
  WORKER_MAX_CONCURRENT_HANDLERS: blankAsUnset(z.coerce.number().int().min(1)),
  /** Partitions whose batches the task consumer works at once (kafkajs partitionsConsumedConcurrently). */
  WORKER_PARTITIONS_CONCURRENTLY: z.coerce.number().int().min(1).default(4),
  /**
   * Longest a task fetch waits at the broker while one of the worker's partitions is paused, in ms. A paused
   * partition is left out of the fetch in flight, so its next command can wait up to this long after it arrives: it
   * bounds per-step latency (BENCHMARKS.md "Latency"). With no partition paused a fetch waits up to 500 ms (or this,
   * when higher) and is answered as soon as a command arrives (at 10 ms an idle worker made 100 fetch requests a
   * second to each broker leading one of its partitions).
   */
  WORKER_FETCH_MAX_WAIT_MS: z.coerce.number().int().min(1).max(10_000).default(10),
  /** Session timeout of the workers' consumer group, in ms. */
  WORKER_SESSION_TIMEOUT_MS: z.coerce.number().int().min(6000).default(30_000),
  /** Heartbeat interval of the task consumer, in ms: at most a third of WORKER_SESSION_TIMEOUT_MS. */
  WORKER_HEARTBEAT_INTERVAL_MS: z.coerce.number().int().min(100).default(3_000),
  /**
   * How long SIGTERM (or app.close()) lets in-flight tasks finish before the worker stops, in ms. The offset commits
   * of the work done get what is left of it, and at least 2 s: set it 2 s under the platform's grace period
   * (Kubernetes' default is 30 s).
   */
  WORKER_DRAIN_DEADLINE_MS: z.coerce.number().int().min(0).default(30_000),
  /** A running task's idempotency lease, in ms; renewed every third of it while the handler runs. */
  WORKER_LEASE_MS: z.coerce.number().int().min(300).default(30_000),
  /**
   * Accepts an idempotency Redis whose maxmemory-policy evicts keys (anything but noeviction; volatile-lru is common
   * on managed Redis): completion records, leases and fences may then be evicted at the memory limit and their steps
   * run again. Default false: such a Redis fails the worker (IDEMPOTENCY_STORE_EVICTS, /health names the policy).
   */
  WORKER_IDEMPOTENCY_ALLOW_EVICTION: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
  /**
   * How long a step's completion record is kept (a redelivery within it re-publishes the stored result), in ms; the
   * task DLQ topics the worker creates keep their records a little less (libs/ops dlqRetention).
   */
  WORKER_COMPLETION_TTL_MS: z.coerce.number().int().min(1000).default(DEFAULT_COMPLETION_TTL_MS),
  /** First backoff of a task's in-process retries, in ms (exponential, full jitter). */
  WORKER_RETRY_INITIAL_MS: z.coerce.number().int().min(0).default(100),
  /** Largest backoff of a task's in-process retries, in ms. */
  WORKER_RETRY_MAX_MS: z.coerce.number().int().min(0).default(5_000),
  /** Partitions of each task topic the worker creates when missing; existing topics are not altered. */
  WORKER_TASK_PARTITIONS: z.coerce.number().int().min(1).default(6),
  /** Partitions of task.results when the worker creates it (the orchestrator co-partitions it with wf.requests). */
  WORKER_RESULT_PARTITIONS: z.coerce.number().int().min(1).default(6),
  /**
   * Rest from the end of one sweep of expired blobs to the start of the next, in ms (0: this worker does not sweep);
   * sweeps never overlap (docs/guarantees/time.md).
   */
  WORKER_BLOB_SWEEP_MS: z.coerce
    .number()
    .int()
    .min(0)
    .default(10 * 60_000),
  /**
   * Flow control by task type, shared by every worker on the same limit store (docs/workers.md "Flow control"):
   * JSON `{"<type>":{"concurrency":5,"perKey":1,"keyField":"customerId","ratePerSec":50}}` (counts of handler calls
   * running at once across workers and per key, handler starts per second spaced evenly). Default: no limits.
   */
  WORKER_FLOW_LIMITS: z
    .string()
    .default('{}')
    .transform((v, ctx) => {
      try {
        return FlowLimitsSchema.parse(JSON.parse(v || '{}'));
      } catch (e) {
        ctx.addIssue({
          code: 'custom',
          message: `not a JSON object of flow limits: ${(e as Error).message}`,
        });
        return z.NEVER;
      }
    }),
  /** The flow limits' Redis (`redis://`), when it is not REDIS_URL; the same credentials and TLS settings apply. */
  WORKER_FLOW_REDIS_URL: unsetWhenEmpty,
  /** How long a flow permit outlives its worker's last refresh, in ms (refreshed every third of it): a crashed worker's permits come back after it. */
  WORKER_FLOW_LEASE_MS: z.coerce.number().int().min(300).default(30_000),
  /**
   * How often a task waiting for its flow-control admission reports the wait to the orchestrator, in ms (TaskWaiting
   * on task.results: when it starts waiting, at this interval, and at its admission); each report restarts the step's
   * deadline, so keep it well below the smallest stepTimeoutMs of a limited task type. At least 100, or 0: no reports
   * (the step's deadline then counts the wait).
   */
  WORKER_FLOW_WAIT_REPORT_MS: z.coerce
    .number()
    .int()
    .refine((v) => v === 0 || v >= 100, 'must be 0 (no reports) or at least 100 ms')
    .default(10_000),
  /** Blob store and size limits (libs/blobs config.ts). */
  ...BlobConfigSchema,
});

export type WorkerConfig = Omit<
  z.infer<typeof Schema>,
  | 'WORKER_GROUP_ID'
  | 'WORKER_MAX_IN_FLIGHT'
  | 'WORKER_MAX_CONCURRENT_HANDLERS'
  | 'WORKER_MAX_IN_FLIGHT_PER_PARTITION'
  | 'WORKER_MAX_HANDLERS_PER_PARTITION'
> & {
  WORKER_GROUP_ID: string;
  WORKER_MAX_IN_FLIGHT: number;
  WORKER_MAX_CONCURRENT_HANDLERS: number;
  WORKER_MAX_IN_FLIGHT_PER_PARTITION: number;
  WORKER_MAX_HANDLERS_PER_PARTITION: number;
  brokers: string[];
  taskTypes: string[];
  kafkaSecurity: KafkaSecurity;
  registry: RegistryConnection;
  redis: RedisConnection;
};

/** Commands in flight per process when WORKER_MAX_IN_FLIGHT is unset. */
const DEFAULT_MAX_IN_FLIGHT = 512;
/** Handler calls at once when neither WORKER_MAX_CONCURRENT_HANDLERS nor WORKER_MAX_IN_FLIGHT is set. */
const DEFAULT_MAX_CONCURRENT_HANDLERS = 128;
/**
 * Largest default of WORKER_MAX_IN_FLIGHT_PER_PARTITION (otherwise the handler slots). 128 rather than 64
 * (2026-12-07): with 64 a worker draining a backlog idled through its Redis and produce round trips (19 % of its main
 * thread); 128 gave 0.63-0.84 of the library ceiling against 0.56-0.74 in seven alternated pairs of `bench:worker`
 * (docs/benchmarks/history.md). Handler calls are bounded apart from it (WORKER_MAX_CONCURRENT_HANDLERS, and per
 * partition WORKER_MAX_HANDLERS_PER_PARTITION).
 */
const MAX_DEFAULT_IN_FLIGHT_PER_PARTITION = 128;
/** Largest default of WORKER_MAX_HANDLERS_PER_PARTITION (otherwise half the handler slots), as the per-partition
 * in-flight bound's was when it also bounded one partition's handlers. */
const MAX_DEFAULT_HANDLERS_PER_PARTITION = 64;

/** Configuration was invalid: the message lists every bad variable. Not retryable. */
export class WorkerConfigError extends SettingsError {
  readonly code = 'WORKER_CONFIG';
  constructor(issues: string[]) {
    super('worker configuration', issues);
  }
}

/**
 * The worker's settings from `env`, every default applied (docs/reference/configuration.md lists them; times in ms). Public so that
 * tools measuring a worker (bench/) use its defaults instead of copies.
 * @throws WorkerConfigError listing every bad or missing variable (KAFKA_BROKERS, SCHEMA_REGISTRY_URL and REDIS_URL
 * are required).
 */
export function loadWorkerConfig(env: NodeJS.ProcessEnv = process.env): WorkerConfig {
  const parsed = Schema.safeParse(env);
  if (!parsed.success)
    throw new WorkerConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`));
  const c = parsed.data;
  if (c.KEYFLOW_BLOB_STORE === 'postgres' && !/^postgres(ql)?:\/\//.test(c.KEYFLOW_BLOB_URL))
    throw new WorkerConfigError([
      'KEYFLOW_BLOB_URL: a postgres:// URL is required with KEYFLOW_BLOB_STORE=postgres',
    ]);
  if (c.WORKER_HEARTBEAT_INTERVAL_MS * 3 > c.WORKER_SESSION_TIMEOUT_MS)
    throw new WorkerConfigError([
      `WORKER_HEARTBEAT_INTERVAL_MS (${c.WORKER_HEARTBEAT_INTERVAL_MS}) must be at most a third of WORKER_SESSION_TIMEOUT_MS`,
    ]);
  const handlers =
    c.WORKER_MAX_CONCURRENT_HANDLERS ?? c.WORKER_MAX_IN_FLIGHT ?? DEFAULT_MAX_CONCURRENT_HANDLERS;
  const connections = connectionSettingsFromEnv(env, c.REDIS_URL);
  if ('issues' in connections) throw new WorkerConfigError(connections.issues);
  return {
    ...c,
    WORKER_GROUP_ID: c.WORKER_GROUP_ID ?? defaultGroupId('workers', c.KEYFLOW_TOPIC_PREFIX),
    WORKER_MAX_IN_FLIGHT: c.WORKER_MAX_IN_FLIGHT ?? DEFAULT_MAX_IN_FLIGHT,
    WORKER_MAX_CONCURRENT_HANDLERS: handlers,
    WORKER_MAX_IN_FLIGHT_PER_PARTITION:
      c.WORKER_MAX_IN_FLIGHT_PER_PARTITION ?? Math.min(MAX_DEFAULT_IN_FLIGHT_PER_PARTITION, handlers),
    // A per-partition in-flight bound that is set bounded one partition's handlers before this setting existed.
    WORKER_MAX_HANDLERS_PER_PARTITION:
      c.WORKER_MAX_HANDLERS_PER_PARTITION ??
      c.WORKER_MAX_IN_FLIGHT_PER_PARTITION ??
      Math.max(1, Math.min(MAX_DEFAULT_HANDLERS_PER_PARTITION, Math.floor(handlers / 2))),
    ...connections,
    redis: connections.redis!, // REDIS_URL is required above
    brokers: brokerList(c.KAFKA_BROKERS),
    taskTypes: c.WORKER_TASK_TYPES.split(',')
      .map((t) => t.trim())
      .filter(Boolean),
  };
}

/**
 * The worker's settings schema (zod, keyed by environment variable name), for the generated configuration reference
 * (tools/docs, `npm run docs:config`): each setting's JSDoc above is its description there.
 */
export const WorkerSettingsSchema = Schema;
