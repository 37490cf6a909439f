import {
  Global,
  Inject,
  Injectable,
  Module,
  type DynamicModule,
  type FactoryProvider,
  type INestApplication,
  type ModuleMetadata,
  type OnApplicationShutdown,
} from '@nestjs/common';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import { ComponentHealth } from '@keyflow/observability';
import type { TriggerDefinition, WorkflowDefinition } from '@keyflow/workflow';
import { HealthController, METRICS_REGISTRY } from './api/health.controller';
import { RunsController, WEBHOOKS } from './api/runs.controller';
import { RunsService } from './api/runs.service';
import { API_KEYS, type ApiKeys } from './api/auth';
import { hostCheck } from './api/cross-site';
import { CONSOLE_DIR, CONSOLE_PATH } from './api/console';
import { OpsController } from './api/ops.controller';
import { httpSpans } from './api/tracing';
import { OpsService } from './api/ops.service';
import { Engine } from './engine/engine';
import { RunReadModel } from './engine/read-model';
import type { ScheduleDef } from './engine/scheduler';
import { createOrchestratorRuntime, type OrchestratorRuntime } from './runtime';
import type { LocalStepHandler } from './engine/local-steps';

/** The injection token of the started {@link OrchestratorRuntime} (`app.get<OrchestratorRuntime>(ORCHESTRATOR_RUNTIME)`). */
export const ORCHESTRATOR_RUNTIME = Symbol('keyflow.OrchestratorRuntime');

/** What an orchestrator runs. */
export interface KeyflowOrchestratorOptions {
  /** Every workflow it runs (definitions from `workflow(...).build()`); a name and version given twice is an Error. */
  workflows: WorkflowDefinition[];
  /** Runs started on a cron schedule; each must name one of `workflows` with an input its schema accepts. */
  schedules?: ScheduleDef[];
  /**
   * Topic triggers (`startTrigger`, `signalTrigger` of `@keyflow/workflow`): runs started or signalled from the records
   * of a team's own topics, exactly once per record (docs/triggers.md). A start trigger must name one of `workflows`.
   */
  triggers?: TriggerDefinition[];
  /**
   * The handlers of the local steps (`.local`) of `workflows`, by task type (`localStep(contract, handler)`): they
   * run in this process (docs/workflows.md "Local steps"). A local step without one refuses the start
   * (LocalStepHandlerMissingError, code LOCAL_STEP_HANDLER_MISSING).
   */
  localSteps?: LocalStepHandler[];
  /**
   * Settings by their environment variable names (docs/reference/configuration.md); default `process.env`. LOG_LEVEL,
   * KEYFLOW_FATAL_EXIT_DELAY_MS, KEYFLOW_STARTUP_TIMEOUT_MS and KEYFLOW_UNDECODABLE_RETRY_MS are read from
   * `process.env` always (they are per process).
   */
  env?: NodeJS.ProcessEnv;
}

/** {@link KeyflowOrchestratorModule.forRootAsync}'s options: the Nest async provider pattern. */
export interface KeyflowOrchestratorAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  useFactory: (...args: never[]) => KeyflowOrchestratorOptions | Promise<KeyflowOrchestratorOptions>;
  inject?: FactoryProvider['inject'];
}

const OPTIONS = Symbol('keyflow.OrchestratorOptions');

@Injectable()
class RuntimeShutdown implements OnApplicationShutdown {
  constructor(@Inject(ORCHESTRATOR_RUNTIME) private readonly rt: OrchestratorRuntime) {}

  /** After the HTTP server closed (`app.close()`, or a signal with `enableShutdownHooks`): the engine and the rest. */
  onApplicationShutdown(): Promise<void> {
    return this.rt.close();
  }
}

/**
 * An orchestrator instance in a NestJS application: the engine (its share of wf.requests/wf.results partitions),
 * the read model, the schedules, and the HTTP API's controllers (runs, webhooks, the ops API under /ops, /health,
 * /metrics), each route guarded by the API keys of KEYFLOW_API_KEYS (docs/security.md "API authentication"). The engine starts
 * while the application is created (Nest awaits the async provider), and stops on `app.close()`. Create the
 * application with `{ rawBody: true }` (webhook signatures are checked on the raw body) and call
 * {@link setupKeyflowOrchestrator} for the request spans, OpenAPI at /docs and the console at /console/.
 *
 *   @Module({ imports: [KeyflowOrchestratorModule.forRoot({ workflows: [greet] })] }) class AppModule {}
 *
 * A refused setting or schedule rejects the application's creation with OrchestratorConfigError when it is created
 * with `abortOnError: false` (by default Nest logs the error and exits the process 1).
 */
@Global()
@Module({})
export class KeyflowOrchestratorModule {
  static forRoot(options: KeyflowOrchestratorOptions): DynamicModule {
    return KeyflowOrchestratorModule.forRootAsync({ useFactory: () => options });
  }

  static forRootAsync(options: KeyflowOrchestratorAsyncOptions): DynamicModule {
    const from = <T>(pick: (rt: OrchestratorRuntime) => T) => ({
      useFactory: pick,
      inject: [ORCHESTRATOR_RUNTIME],
    });
    return {
      module: KeyflowOrchestratorModule,
      // Its services (RunsService, Engine...) for every module of the application, as the worker module does.
      global: true,
      imports: options.imports ?? [],
      controllers: [RunsController, OpsController, HealthController],
      providers: [
        { provide: OPTIONS, useFactory: options.useFactory, inject: options.inject ?? [] },
        {
          provide: ORCHESTRATOR_RUNTIME,
          useFactory: (o: KeyflowOrchestratorOptions) =>
            createOrchestratorRuntime(
              o.workflows,
              o.env ?? process.env,
              o.schedules ?? [],
              o.triggers ?? [],
              o.localSteps ?? [],
            ),
          inject: [OPTIONS],
        },
        RuntimeShutdown,
        { provide: RunsService, ...from((rt) => rt.runs) },
        { provide: OpsService, ...from((rt) => rt.ops) },
        { provide: Engine, ...from((rt) => rt.engine) },
        { provide: RunReadModel, ...from((rt) => rt.readModel) },
        { provide: METRICS_REGISTRY, ...from((rt) => rt.registry) },
        { provide: ComponentHealth, ...from((rt) => rt.health) },
        { provide: WEBHOOKS, ...from((rt) => rt.webhooks) },
        { provide: API_KEYS, ...from((rt) => rt.apiKeys) },
      ],
      exports: [ORCHESTRATOR_RUNTIME, RunsService, Engine, RunReadModel],
    };
  }
}

/**
 * What the orchestrator's HTTP side needs from the application itself: a SERVER span per request (continuing the
 * caller's `traceparent`), the Host check on every request (421 HOST_NOT_ALLOWED for a Host that does not name the
 * listener or a name of KEYFLOW_API_ALLOWED_HOSTS: api/cross-site.ts), OpenAPI at /docs (JSON at /docs/openapi.json) and the ops console's files at /console/.
 * Call it before `app.listen`. The spans cover every request of the application, and the OpenAPI document (titled
 * "keyflow orchestrator", bearer auth) lists the application's own routes too.
 * @throws TypeError when the application is not on Express (@nestjs/platform-express)
 */
export function setupKeyflowOrchestrator(app: INestApplication): void {
  const express = app as NestExpressApplication;
  if (typeof express.useStaticAssets !== 'function')
    throw new TypeError('setupKeyflowOrchestrator needs an Express application (@nestjs/platform-express)');
  express.use(httpSpans);
  // The Host rule for every request (the console's files and /docs included): DNS rebinding (api/cross-site.ts).
  express.use(hostCheck(app.get<ApiKeys>(API_KEYS).hosts));
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
  express.useStaticAssets(CONSOLE_DIR, { prefix: CONSOLE_PATH, index: 'index.html' });
}
