import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { describeKafkaSecurity } from '@keyflow/kafka';
import { exitOnSignals } from '@keyflow/observability';
import { describeRedis } from '@keyflow/idempotency';
import type { TriggerDefinition, WorkflowDefinition } from '@keyflow/workflow';
import type { ScheduleDef } from './engine/scheduler';
import { loadOrchestratorConfig, requireApiSettings } from './config';
import { KeyflowOrchestratorModule, ORCHESTRATOR_RUNTIME, setupKeyflowOrchestrator } from './module';
import { checkSchedules, checkTriggers, type OrchestratorRuntime } from './runtime';
import { WorkflowRegistry } from './workflows/registry';
import { localHandlersOf, type LocalStepHandler } from './engine/local-steps';

/**
 * Starts an orchestrator instance as a process of its own: {@link KeyflowOrchestratorModule} with the application's
 * `definitions` (and `triggers`, topic triggers that start or signal their runs) and nothing else (it creates the task topics of those definitions only), the HTTP API (OpenAPI at
 * /docs, /health, /metrics, the ops API under /ops) and the ops console (/console/) on
 * ORCHESTRATOR_HTTP_HOST:ORCHESTRATOR_HTTP_PORT. SIGTERM/SIGINT close it and exit 0.
 * @throws OrchestratorConfigError for settings or schedules that could never work
 */
export async function bootstrapOrchestrator(
  definitions: WorkflowDefinition[] = [],
  env: NodeJS.ProcessEnv = process.env,
  schedules: ScheduleDef[] = [],
  triggers: TriggerDefinition[] = [],
  /** The handlers of the definitions' local steps (`.local`): `localStep(contract, handler)` each. */
  localSteps: LocalStepHandler[] = [],
) {
  // Settings and schedules first: a refused one is thrown here as it is, before Nest logs its own report of a
  // failed provider.
  requireApiSettings(loadOrchestratorConfig(env));
  const workflows = definitions;
  const registry = new WorkflowRegistry().register(...workflows);
  checkSchedules(registry, schedules);
  checkTriggers(registry, triggers);
  localHandlersOf(workflows, localSteps); // a local step without a handler: LocalStepHandlerMissingError, here
  const app = await NestFactory.create<NestExpressApplication>(
    KeyflowOrchestratorModule.forRoot({ workflows, schedules, triggers, env, localSteps }),
    // abortOnError false: a setting refused at startup reaches the caller (main prints it and exits 1).
    { logger: ['error', 'warn'], rawBody: true, abortOnError: false },
  );
  setupKeyflowOrchestrator(app);
  const rt = app.get<OrchestratorRuntime>(ORCHESTRATOR_RUNTIME);
  await app.listen(rt.cfg.ORCHESTRATOR_HTTP_PORT, rt.cfg.ORCHESTRATOR_HTTP_HOST);
  const url = await app.getUrl();
  exitOnSignals(rt.logger, 'shutting down', () => app.close());
  rt.logger.info(
    {
      http: url,
      groupId: rt.cfg.ORCHESTRATOR_GROUP_ID,
      workflows: rt.workflows.names(),
      kafka: describeKafkaSecurity(rt.cfg.kafkaSecurity),
      redis: describeRedis(rt.cfg.redis),
      tracing: rt.exportingTraces ? 'otlp' : 'off',
    },
    'orchestrator ready',
  );
  return { app, url, engine: rt.engine, readModel: rt.readModel, cfg: rt.cfg };
}
