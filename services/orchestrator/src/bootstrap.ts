import 'reflect-metadata';
import { Module, type DynamicModule } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import { EventCodec } from '@keyflow/contracts';
import {
  BatchingProducer,
  describeKafkaSecurity,
  connectUntilAnswered,
  createIdempotentProducer,
  createKafka,
  ensureDlqLedger,
  watchProducer,
} from '@keyflow/kafka';
import {
  ComponentHealth,
  createLogger,
  createMetricsRegistry,
  exitOnComponentFailure,
  exitOnSignals,
  startTracing,
} from '@keyflow/observability';
import { runInputIssues, type WorkflowDefinition } from '@keyflow/workflow';
import { createRedis, describeRedis } from '@keyflow/idempotency';
import { lagGroups, loadOrchestratorConfig, OrchestratorConfigError, requireApiSettings } from './config';
import { LagMonitor } from './engine/lag-monitor';
import { Engine } from './engine/engine';
import { orchestratorMetrics } from './engine/metrics';
import { RunReadModel } from './engine/read-model';
import { COMPONENTS } from './engine/components';
import { Scheduler, type ScheduleDef } from './engine/scheduler';
import { claimCheckFromConfig } from '@keyflow/blobs';
import { HealthController, METRICS_REGISTRY } from './api/health.controller';
import { RunsController, WEBHOOKS, type WebhookSettings } from './api/runs.controller';
import { RequestKeys } from './api/request-keys';
import { RunsService } from './api/runs.service';
import { API_KEYS, ApiAuthGuard, ApiKeys } from './api/auth';
import { CONSOLE_DIR, CONSOLE_PATH } from './api/console';
import { OpsController } from './api/ops.controller';
import { httpSpans } from './api/tracing';
import { OpsService } from './api/ops.service';
import { builtinWorkflows, WorkflowRegistry } from './workflows/registry';

/**
 * Starts an orchestrator instance: the read model (all of wf.state), the engine (its share of the partitions) and
 * the HTTP API (OpenAPI at /docs, /health, /metrics, the ops API under /ops) and the ops console (/console/).
 * SIGTERM/SIGINT close it and exit 0. When a part fails for
 * good (the engine's consumer crashes, its producer or the API's fails, the read model's consumer crashes), /health
 * answers 503 naming it and the process exits 1 shortly after (KEYFLOW_FATAL_EXIT_DELAY_MS), so a supervisor
 * restarts it.
 */
export async function bootstrapOrchestrator(
  definitions: WorkflowDefinition[] = [],
  env: NodeJS.ProcessEnv = process.env,
  schedules: ScheduleDef[] = [],
) {
  const cfg = requireApiSettings(loadOrchestratorConfig(env));
  // Before anything makes a span: OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set (README "Tracing").
  const tracing = startTracing('keyflow-orchestrator', env);
  const logger = createLogger('orchestrator');
  const registry = createMetricsRegistry('orchestrator');
  const metrics = orchestratorMetrics(registry);
  const workflows = new WorkflowRegistry().register(...builtinWorkflows, ...definitions);
  checkSchedules(workflows, schedules);
  const kafka = createKafka({
    brokers: cfg.brokers,
    clientId: `keyflow-orchestrator-${cfg.ORCHESTRATOR_INSTANCE_ID}`,
    logger,
    security: cfg.kafkaSecurity,
  });
  const codec = new EventCodec({ ...cfg.registry, topicPrefix: cfg.KEYFLOW_TOPIC_PREFIX });
  const apiKeys = new ApiKeys(cfg.apiKeys, cfg.KEYFLOW_METRICS_AUTH);
  if (!apiKeys.enabled)
    logger.warn(
      { host: cfg.ORCHESTRATOR_HTTP_HOST },
      'API authentication is off (no KEYFLOW_API_KEYS): anyone who reaches the port can start and control runs',
    );
  const health = new ComponentHealth();
  exitOnComponentFailure(health, logger);
  const claim = claimCheckFromConfig(cfg);
  const readModel = new RunReadModel(
    kafka,
    codec,
    `${cfg.ORCHESTRATOR_GROUP_ID}.read-model.${cfg.ORCHESTRATOR_INSTANCE_ID}.${Date.now()}`,
    logger,
    { health, skipped: metrics.snapshotsSkipped, registry, claim },
  );
  const engine = new Engine(cfg, kafka, codec, workflows, readModel, logger, metrics, health, claim);
  await engine.start(); // creates topics, checks co-partitioning, registers schemas
  // The DLQ ledger the console's actions write to. Without it (no right to create topics, registry refusing) the
  // orchestrator still runs: DLQ counts show every record as pending and a console action answers the error.
  await ensureDlqLedger(kafka, codec).catch((err) =>
    logger.warn(
      { err },
      'the DLQ ledger (dlq.handled) could not be set up; DLQ actions will fail until it can',
    ),
  );
  const lagMonitor = new LagMonitor(kafka, metrics, logger, {
    groups: lagGroups(cfg),
    intervalMs: cfg.ORCHESTRATOR_LAG_INTERVAL_MS,
    codec,
  });
  lagMonitor.start();
  const producer = watchProducer(createIdempotentProducer(kafka), (err) =>
    health.fail(COMPONENTS.apiProducer, err),
  );
  await connectUntilAnswered(producer, { what: 'API producer', logger });
  // Connects in the background and reconnects by itself: while Redis is away (a restart at startup included), the
  // requests that need it answer 503 and the process stays up.
  const redis = createRedis(cfg.redis, { maxRetriesPerRequest: 2 });
  redis.on('error', (err) => logger.warn({ err }, 'request key store (Redis) error'));
  const keys = new RequestKeys(redis, cfg.KEYFLOW_TOPIC_PREFIX);
  const webhooks: WebhookSettings = { enabled: cfg.WEBHOOKS_ENABLED, secrets: cfg.WEBHOOK_SECRETS, keys };
  const runs = new RunsService(codec, new BatchingProducer(producer), workflows, readModel, keys, {
    idempotencyKeyTtlMs: cfg.IDEMPOTENCY_KEY_TTL_MS,
    signalBufferLimit: cfg.ORCHESTRATOR_SIGNAL_BUFFER_LIMIT,
  });
  const ops = new OpsService(kafka, codec, lagMonitor, readModel, metrics, producer, logger, runs.pii);
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

  @Module({})
  class OrchestratorModule {
    static register(): DynamicModule {
      return {
        module: OrchestratorModule,
        controllers: [RunsController, OpsController, HealthController],
        providers: [
          { provide: RunsService, useValue: runs },
          { provide: OpsService, useValue: ops },
          { provide: Engine, useValue: engine },
          { provide: RunReadModel, useValue: readModel },
          { provide: METRICS_REGISTRY, useValue: registry },
          { provide: ComponentHealth, useValue: health },
          { provide: WEBHOOKS, useValue: webhooks },
          { provide: API_KEYS, useValue: apiKeys },
          { provide: APP_GUARD, useClass: ApiAuthGuard },
        ],
      };
    }
  }

  const app = await NestFactory.create<NestExpressApplication>(OrchestratorModule.register(), {
    logger: ['error', 'warn'],
    rawBody: true,
  });
  app.use(httpSpans);
  const doc = SwaggerModule.createDocument(
    app,
    new DocumentBuilder()
      .setTitle('keyflow orchestrator')
      .setVersion('0.1.0')
      .addBearerAuth({ type: 'http', scheme: 'bearer', description: 'An API key of KEYFLOW_API_KEYS' })
      .addSecurityRequirements('bearer')
      .build(),
  );
  SwaggerModule.setup('docs', app, doc, { jsonDocumentUrl: 'docs/openapi.json' });
  app.useStaticAssets(CONSOLE_DIR, { prefix: CONSOLE_PATH, index: 'index.html' });
  await app.listen(cfg.ORCHESTRATOR_HTTP_PORT, cfg.ORCHESTRATOR_HTTP_HOST);
  const url = await app.getUrl();
  exitOnSignals(logger, 'shutting down', () => {
    scheduler.stop();
    lagMonitor.stop();
    return Promise.all([
      app.close(),
      engine.stop(),
      readModel.stop(),
      producer.disconnect(),
      redis.quit(),
    ]).then(() => tracing.shutdown());
  });
  logger.info(
    {
      http: url,
      groupId: cfg.ORCHESTRATOR_GROUP_ID,
      workflows: workflows.names(),
      kafka: describeKafkaSecurity(cfg.kafkaSecurity),
      redis: describeRedis(cfg.redis),
      tracing: tracing.exporting ? 'otlp' : 'off',
    },
    'orchestrator ready',
  );
  return { app, url, engine, readModel, cfg };
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
