import { EventCodec } from '@keyflow/contracts';
import {
  BatchingProducer,
  connectUntilAnswered,
  createIdempotentProducer,
  createKafka,
  watchProducer,
  type Kafka,
} from '@keyflow/kafka';
import { ensureDlqLedger, isCatalogDlq } from '@keyflow/ops';
import {
  ComponentHealth,
  createLogger,
  createMetricsRegistry,
  exitOnComponentFailure,
  startTracing,
  type Logger,
  type Registry,
} from '@keyflow/observability';
import { runInputIssues, type TriggerDefinition, type WorkflowDefinition } from '@keyflow/workflow';
import { dlqOf, triggerTopic } from '@keyflow/schemas';
import { checkRedisMemoryPolicy, createRedis, IdempotencyStoreEvictsError } from '@keyflow/idempotency';
import type Redis from 'ioredis';
import { claimCheckFromConfig, type ClaimCheck } from '@keyflow/blobs';
import {
  lagGroups,
  loadOrchestratorConfig,
  OrchestratorConfigError,
  requireApiSettings,
  requestKeyTtlMs,
} from './config';
import { LagMonitor } from './engine/lag-monitor';
import { Engine } from './engine/engine';
import { orchestratorMetrics, type OrchestratorMetrics } from './engine/metrics';
import { RunReadModel } from './engine/read-model';
import { COMPONENTS } from './engine/components';
import { Scheduler, type ScheduleDef } from './engine/scheduler';
import type { WebhookSettings } from './api/runs.controller';
import { RequestKeys } from './api/request-keys';
import { RunsService } from './api/runs.service';
import { ApiKeys } from './api/auth';
import { OpsService } from './api/ops.service';
import { WorkflowRegistry } from './workflows/registry';
import { localHandlersOf, LocalStepRunner, type LocalStepHandler } from './engine/local-steps';
import type { TaskHandlerFn } from '@keyflow/handler';
import { TriggerRunners, triggerIssues } from './triggers/triggers';

/** What {@link createOrchestratorRuntime} starts, and how to stop it. */
export interface OrchestratorRuntime {
  cfg: ReturnType<typeof requireApiSettings>;
  logger: Logger;
  engine: Engine;
  readModel: RunReadModel;
  runs: RunsService;
  ops: OpsService;
  registry: Registry;
  health: ComponentHealth;
  webhooks: WebhookSettings;
  apiKeys: ApiKeys;
  workflows: WorkflowRegistry;
  /** The application's topic triggers on this instance. */
  triggers: TriggerRunners;
  exportingTraces: boolean;
  /** Stops the scheduler, the lag monitor, the engine, the read model, the API's producer and Redis, then tracing. */
  close(): Promise<void>;
}

/**
 * Starts everything of an orchestrator instance but its HTTP listener: tracing, the read model (all of wf.state),
 * the engine (its share of the partitions; creates topics, checks co-partitioning, registers schemas), the lag
 * monitor, the API's producer and request key store, and the schedules. `workflows` are all it runs (the
 * application's own, nothing built in); `env` holds the settings by their environment names
 * (docs/reference/configuration.md).
 * When a part fails for good (the engine's consumer crashes, its producer or the API's fails, the read model's
 * consumer crashes), /health answers 503 naming it and the process exits 1 shortly after
 * (KEYFLOW_FATAL_EXIT_DELAY_MS), so a supervisor restarts it.
 * @throws OrchestratorConfigError for settings or schedules that could never work (before anything connects); an
 *   Error for a workflow name and version registered twice; a Kafka or registry error when a part cannot start
 *   (what had started is stopped first)
 */
export async function createOrchestratorRuntime(
  definitions: WorkflowDefinition[],
  env: NodeJS.ProcessEnv,
  schedules: ScheduleDef[],
  triggerDefs: TriggerDefinition[] = [],
  /** The handlers of the definitions' local steps (`.local`), by task type: see {@link localStep}. */
  localSteps: readonly LocalStepHandler[] = [],
): Promise<OrchestratorRuntime> {
  const cfg = requireApiSettings(loadOrchestratorConfig(env));
  const workflows = new WorkflowRegistry().register(...definitions);
  checkSchedules(workflows, schedules);
  checkTriggers(workflows, triggerDefs);
  const localHandlers = localHandlersOf(definitions, localSteps);
  // Before anything makes a span: OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/operating.md "Tracing").
  const tracing = startTracing('keyflow-orchestrator', env);
  const logger = createLogger('orchestrator');
  const registry = createMetricsRegistry('orchestrator');
  const metrics = orchestratorMetrics(registry);
  const kafka = createKafka({
    brokers: cfg.brokers,
    clientId: `keyflow-orchestrator-${cfg.ORCHESTRATOR_INSTANCE_ID}`,
    logger,
    security: cfg.kafkaSecurity,
  });
  const codec = new EventCodec({ ...cfg.registry, topicPrefix: cfg.KEYFLOW_TOPIC_PREFIX });
  const apiKeys = apiKeysOf(cfg, logger);
  // What started, stopped in reverse when a later part fails: an application that catches the failure is not left
  // with consumers, timers and connections running.
  const started: Array<() => unknown> = [];
  try {
    const health = new ComponentHealth();
    exitOnComponentFailure(health, logger);
    const w: Wiring = { cfg, workflows, logger, metrics, registry, kafka, codec, health, started };
    const { engine, readModel, claim, local } = await startEngine(w, localHandlers);
    const { lagMonitor, dlqs } = await startLagMonitor(w, triggerDefs);
    const { producer, redis, webhooks, runs } = await startApi(w, readModel, claim);
    const triggers = await startTriggers(w, triggerDefs, readModel);
    const ops = new OpsService(
      kafka,
      codec,
      lagMonitor,
      readModel,
      metrics,
      producer,
      logger,
      runs.pii,
      dlqs,
      triggers,
      redis, // the workers' flow-control store when they share this Redis (their default)
    );
    const scheduler = startScheduler(w, schedules, runs);
    let closing: Promise<void> | undefined;
    return {
      cfg,
      logger,
      engine,
      readModel,
      runs,
      ops,
      registry,
      health,
      webhooks,
      apiKeys,
      workflows,
      triggers,
      exportingTraces: tracing.exporting,
      // Once: app.close() and a signal handler may both ask.
      close: () =>
        (closing ??= (async () => {
          scheduler.stop();
          lagMonitor.stop();
          await triggers.stop();
          await Promise.all([engine.stop(), readModel.stop(), producer.disconnect(), redis.quit()]);
          await local?.stop();
          await tracing.shutdown();
        })()),
    };
  } catch (err) {
    for (const stop of [...started.reverse(), () => tracing.shutdown()])
      await Promise.resolve()
        .then(stop)
        .catch(() => undefined);
    throw err;
  }
}

/** What the steps of {@link createOrchestratorRuntime} share; each step pushes how to stop what it started. */
interface Wiring {
  cfg: OrchestratorRuntime['cfg'];
  workflows: WorkflowRegistry;
  logger: Logger;
  metrics: OrchestratorMetrics;
  registry: Registry;
  kafka: Kafka;
  codec: EventCodec;
  health: ComponentHealth;
  /** Stops of what started so far, run in reverse when a later step fails. */
  started: Array<() => unknown>;
}

/** The API's keys; with none, a warning that anyone who reaches the port (or only loopback) controls runs. */
function apiKeysOf(cfg: OrchestratorRuntime['cfg'], logger: Logger): ApiKeys {
  const apiKeys = new ApiKeys(cfg.apiKeys, cfg.KEYFLOW_METRICS_AUTH, cfg.KEYFLOW_API_INSECURE, {
    allowed: cfg.KEYFLOW_API_ALLOWED_HOSTS,
    listen: cfg.ORCHESTRATOR_HTTP_HOST,
  });
  if (!apiKeys.enabled)
    logger.warn(
      { insecure: cfg.KEYFLOW_API_INSECURE },
      cfg.KEYFLOW_API_INSECURE
        ? 'API authentication is off (no KEYFLOW_API_KEYS, KEYFLOW_API_INSECURE): anyone who reaches the port can start and control runs'
        : 'API authentication is off (no KEYFLOW_API_KEYS): the API answers only requests to a loopback address',
    );
  return apiKeys;
}

/** Starts the read model (all of wf.state) and the engine (creates topics, checks co-partitioning, registers schemas). */
async function startEngine(
  { cfg, workflows, logger, metrics, registry, kafka, codec, health, started }: Wiring,
  localHandlers: Map<string, TaskHandlerFn>,
) {
  const claim = claimCheckFromConfig(cfg);
  const readModel = new RunReadModel(
    kafka,
    codec,
    `${cfg.ORCHESTRATOR_GROUP_ID}.read-model.${cfg.ORCHESTRATOR_INSTANCE_ID}.${Date.now()}`,
    logger,
    { health, skipped: metrics.snapshotsSkipped, registry, claim },
  );
  const engine = new Engine(cfg, kafka, codec, workflows, readModel, logger, metrics, health, claim);
  started.push(
    () => engine.stop(),
    () => readModel.stop(),
  );
  // The local steps' runner, before the engine consumes: a local command is handed to it after its commit.
  let local: LocalStepRunner | undefined;
  if (localHandlers.size) {
    local = new LocalStepRunner({ cfg, kafka, codec, claim, logger, registry, health }, localHandlers);
    started.push(() => local!.stop());
    await local.start();
    engine.useLocalSteps(local);
  }
  await engine.start(); // creates topics, checks co-partitioning, registers schemas
  return { engine, readModel, claim, local };
}

/**
 * Sets up the DLQ ledger (a failure only warns) and starts the lag monitor over this deployment's DLQs.
 * @returns the monitor and the DLQs this deployment declares (the ops API acts on these only).
 */
async function startLagMonitor(
  { cfg, workflows, logger, metrics, kafka, codec, started }: Wiring,
  triggerDefs: TriggerDefinition[],
) {
  // The DLQ ledger the console's actions write to. Without it (no right to create topics, registry refusing) the
  // orchestrator still runs: DLQ counts show every record as pending and a console action answers the error.
  await ensureDlqLedger(kafka, codec).catch((err) =>
    logger.warn(
      { err },
      'the DLQ ledger (dlq.handled) could not be set up; DLQ actions will fail until it can',
    ),
  );
  // The DLQs this deployment declares: the only ones the lag monitor counts and the ops API acts on.
  const dlqs = new Set<string>([
    ...Engine.topics(cfg, workflows)
      .map((t) => t.topic)
      .filter((t) => isCatalogDlq(t)),
    ...triggerDefs.map((t) => dlqOf(triggerTopic(t.name))),
  ]);
  const lagMonitor = new LagMonitor(kafka, metrics, logger, {
    groups: lagGroups(cfg),
    intervalMs: cfg.ORCHESTRATOR_LAG_INTERVAL_MS,
    codec,
    dlqs,
  });
  lagMonitor.start();
  started.push(() => lagMonitor.stop());
  return { lagMonitor, dlqs };
}

/** Connects the API's producer and its request key store (Redis), and makes the runs service on them. */
async function startApi(
  { cfg, workflows, logger, kafka, codec, health, started }: Wiring,
  readModel: RunReadModel,
  claim: ClaimCheck,
) {
  const producer = watchProducer(createIdempotentProducer(kafka), (err) =>
    health.fail(COMPONENTS.apiProducer, err),
  );
  started.push(() => producer.disconnect());
  await connectUntilAnswered(producer, { what: 'API producer', logger });
  // Connects in the background and reconnects by itself: while Redis is away (a restart at startup included), the
  // requests that need it answer 503 and the process stays up.
  // Auto-pipelining: the commands concurrent requests issue in one event-loop turn (their keys' claims, settles)
  // go to Redis in one write and come back in one read, each still its own atomic command with its own reply.
  const redis = createRedis(cfg.redis, { maxRetriesPerRequest: 2, enableAutoPipelining: true });
  redis.on('error', (err) => logger.warn({ err }, 'request key store (Redis) error'));
  // Idempotency-Keys and webhook delivery ids evicted at maxmemory would let a retried request start a second run:
  // checked at every connection and shown as degraded (docs/guarantees/idempotency-store.md).
  redis.on('ready', () => void checkRequestKeyEviction(redis, health, logger));
  started.push(() => redis.disconnect());
  const keys = new RequestKeys(redis, cfg.KEYFLOW_TOPIC_PREFIX);
  const webhooks: WebhookSettings = { enabled: cfg.WEBHOOKS_ENABLED, secrets: cfg.WEBHOOK_SECRETS, keys };
  const runs = new RunsService(
    codec,
    new BatchingProducer(producer, { maxBytes: claim.thresholdBytes }),
    workflows,
    readModel,
    keys,
    {
      idempotencyKeyTtlMs: requestKeyTtlMs(cfg),
      signalBufferLimit: cfg.ORCHESTRATOR_SIGNAL_BUFFER_LIMIT,
    },
  );
  return { producer, redis, webhooks, runs };
}

/**
 * Sets up the topic triggers' topics and starts each trigger in the background (see TriggerRunners: a missing source
 * topic degrades /health until it appears).
 */
async function startTriggers(
  { cfg, workflows, logger, registry, kafka, codec, health, started }: Wiring,
  defs: TriggerDefinition[],
  readModel: RunReadModel,
): Promise<TriggerRunners> {
  const triggers = new TriggerRunners(defs, {
    kafka,
    codec,
    readModel,
    logger,
    registry,
    health,
    workflows,
    topicPrefix: cfg.KEYFLOW_TOPIC_PREFIX,
    maxMessageBytes: cfg.KEYFLOW_MAX_MESSAGE_BYTES,
    sessionTimeoutMs: cfg.ORCHESTRATOR_SESSION_TIMEOUT_MS,
    engineGroup: cfg.ORCHESTRATOR_GROUP_ID,
  });
  started.push(() => triggers.stop());
  await triggers.start();
  return triggers;
}

/**
 * The topic triggers' names are unique and each start trigger names a registered workflow, checked before anything
 * starts. @throws OrchestratorConfigError naming each trigger that could never run
 */
export function checkTriggers(workflows: WorkflowRegistry, triggers: TriggerDefinition[]): void {
  const issues = triggerIssues(triggers, workflows);
  if (issues.length) throw new OrchestratorConfigError(issues);
}

/** Starts the schedules' ticking: each due firing starts its run through `runs` (trigger `schedule`). */
function startScheduler({ cfg, logger }: Wiring, schedules: ScheduleDef[], runs: RunsService): Scheduler {
  const scheduler = new Scheduler(
    schedules,
    (s, runId, fireAt) =>
      runs.start({
        workflow: s.workflow,
        input: { ...(s.input ?? {}), scheduledAt: fireAt },
        runId,
        idempotencyKey: runId,
        trigger: 'schedule',
      }),
    logger,
    {
      catchUp: {
        mode: cfg.SCHEDULE_CATCH_UP,
        windowMs: cfg.SCHEDULE_CATCH_UP_WINDOW_MS,
        max: cfg.SCHEDULE_CATCH_UP_MAX,
      },
    },
  );
  scheduler.startTicking();
  return scheduler;
}

/**
 * Every schedule names a registered workflow and an input its input schema accepts (with the `scheduledAt` the
 * scheduler adds, in ms since the epoch, as JSON carries it), checked before anything starts.
 * @throws OrchestratorConfigError naming each schedule that could never start a run
 */
export function checkSchedules(workflows: WorkflowRegistry, schedules: ScheduleDef[]): void {
  const issues = schedules.flatMap((s) => {
    const def = workflows.get(s.workflow);
    if (!def) return [`schedule ${s.id}: unknown workflow ${s.workflow}`];
    const input: unknown = JSON.parse(JSON.stringify({ ...(s.input ?? {}), scheduledAt: Date.now() }));
    return runInputIssues(def, input).map(
      (i) =>
        `schedule ${s.id}: its input does not match workflow ${def.name} v${def.version}: ${i.path}: ${i.message}`,
    );
  });
  if (issues.length) throw new OrchestratorConfigError(issues);
}

/** The degraded condition of a request key store (Redis) whose maxmemory-policy evicts keys. */
export const REQUEST_KEYS_EVICT_CONDITION = 'request-keys-evict';

/**
 * Asks the request key store's Redis what it does at maxmemory: a policy other than noeviction degrades /health
 * (code IDEMPOTENCY_STORE_EVICTS, naming the policy) and is logged; noeviction clears it. A check Redis does not
 * answer is logged and left to the next connection.
 */
async function checkRequestKeyEviction(redis: Redis, health: ComponentHealth, logger: Logger): Promise<void> {
  try {
    const p = await checkRedisMemoryPolicy(redis);
    if (!p.evicts) return health.recover(REQUEST_KEYS_EVICT_CONDITION);
    const err = new IdempotencyStoreEvictsError(p.policy);
    health.degrade(REQUEST_KEYS_EVICT_CONDITION, { code: err.code, error: err.message });
    logger.warn({ policy: p.policy }, `request key store: ${err.message}`);
  } catch (err) {
    logger.warn({ err }, "could not check the request key store's maxmemory-policy");
  }
}
