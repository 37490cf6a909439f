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
import {
  createLogger,
  createMetricsRegistry,
  exitOnComponentFailure,
  startTracing,
  type Logger,
  type Registry,
} from '@keyflow/observability';
import { loadWorkerConfig, type WorkerConfig } from './config';
import { HealthController, METRICS_REGISTRY } from './health.controller';
import { KafkaTaskTransport } from './transport/kafka-task.transport';
import { EventPublisher } from '@keyflow/task-runtime';
import { BLOB_STORE } from './blob-store';

/** Settings of a worker. */
export interface KeyflowWorkerOptions {
  /**
   * Settings by their environment variable names (docs/reference/configuration.md); default `process.env`. LOG_LEVEL,
   * KEYFLOW_FATAL_EXIT_DELAY_MS, KEYFLOW_STARTUP_TIMEOUT_MS and KEYFLOW_UNDECODABLE_RETRY_MS are read from
   * `process.env` always (they are per process).
   */
  env?: NodeJS.ProcessEnv;
}

/** {@link KeyflowWorkerModule.forRootAsync}'s options: the Nest async provider pattern. */
export interface KeyflowWorkerAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  useFactory: (...args: never[]) => KeyflowWorkerOptions | Promise<KeyflowWorkerOptions>;
  inject?: FactoryProvider['inject'];
}

/** A worker's parts, built once per application: `app.get<WorkerRuntime>(WORKER_RUNTIME)`. */
export interface WorkerRuntime {
  cfg: WorkerConfig;
  logger: Logger;
  transport: KafkaTaskTransport;
  registry: Registry;
  publisher: EventPublisher;
  exportingTraces: boolean;
  shutdownTracing(): Promise<void>;
}

/** The injection token of the {@link WorkerRuntime}. */
export const WORKER_RUNTIME = Symbol('keyflow.WorkerRuntime');
const OPTIONS = Symbol('keyflow.WorkerOptions');

function createWorkerRuntime(env: NodeJS.ProcessEnv): WorkerRuntime {
  const cfg = loadWorkerConfig(env);
  // Before anything makes a span: OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/operating.md "Tracing").
  // Without an exporter, no AsyncLocalStorage: the executor passes trace contexts explicitly (docs/operating.md "Tracing").
  const tracing = startTracing('keyflow-worker', env, { activeContext: 'when-exporting' });
  const logger = createLogger('workers');
  const registry = createMetricsRegistry('workers');
  const publisher = new EventPublisher();
  const transport = new KafkaTaskTransport(cfg, logger, registry, publisher);
  return {
    cfg,
    logger,
    transport,
    registry,
    publisher,
    exportingTraces: tracing.exporting,
    shutdownTracing: () => tracing.shutdown(),
  };
}

@Injectable()
class TracingShutdown implements OnApplicationShutdown {
  constructor(@Inject(WORKER_RUNTIME) private readonly rt: WorkerRuntime) {}

  /** After the transport drained (`app.close()`): the spans still buffered are exported. */
  onApplicationShutdown(): Promise<void> {
    return this.rt.shutdownTracing();
  }
}

/**
 * A keyflow worker in a NestJS application: the Kafka task transport (consumer group WORKER_GROUP_ID on the task
 * topics of the handlers found, Redis idempotency, results and DLQ), GET /health and GET /metrics, and, for the
 * handlers, `EventPublisher` and the blob store (`@Inject(BLOB_STORE)`). Global: the application's own modules
 * declare the handler classes (controllers whose methods carry `@TaskHandler`). Call {@link startKeyflowWorker}
 * after creating the application to start consuming.
 *
 *   @Module({ imports: [KeyflowWorkerModule.forRoot()], controllers: [GreetingHandlers] }) class AppModule {}
 *
 * A refused setting rejects the application's creation with WorkerConfigError when it is created with
 * `abortOnError: false` (by default Nest logs the error and exits the process 1).
 */
@Global()
@Module({})
export class KeyflowWorkerModule {
  static forRoot(options: KeyflowWorkerOptions = {}): DynamicModule {
    return KeyflowWorkerModule.forRootAsync({ useFactory: () => options });
  }

  static forRootAsync(options: KeyflowWorkerAsyncOptions): DynamicModule {
    const from = <T>(pick: (rt: WorkerRuntime) => T) => ({ useFactory: pick, inject: [WORKER_RUNTIME] });
    return {
      module: KeyflowWorkerModule,
      global: true,
      imports: options.imports ?? [],
      controllers: [HealthController],
      providers: [
        { provide: OPTIONS, useFactory: options.useFactory, inject: options.inject ?? [] },
        {
          provide: WORKER_RUNTIME,
          useFactory: (o: KeyflowWorkerOptions) => createWorkerRuntime(o.env ?? process.env),
          inject: [OPTIONS],
        },
        TracingShutdown,
        { provide: KafkaTaskTransport, ...from((rt) => rt.transport) },
        { provide: METRICS_REGISTRY, ...from((rt) => rt.registry) },
        { provide: EventPublisher, ...from((rt) => rt.publisher) },
        { provide: BLOB_STORE, ...from((rt) => rt.transport.blobs) },
      ],
      exports: [WORKER_RUNTIME, KafkaTaskTransport, EventPublisher, BLOB_STORE],
    };
  }
}

/**
 * Connects the worker's transport to `app` as its microservice and starts consuming: handler exceptions reach the
 * task executor unchanged (each `@TaskHandler` method carries a filter that passes them through), and the
 * application's global enhancers stay on its HTTP routes (`inheritAppConfig: false`). When the consumer or the
 * result producer fails for good, /health answers 503 and the process exits 1 shortly after
 * (KEYFLOW_FATAL_EXIT_DELAY_MS). `app.close()` drains in-flight tasks, then closes the transport.
 * Call it once, after `enableShutdownHooks()` (a signal while Kafka is slow to answer then drains too).
 * @returns the worker's parts (`WORKER_RUNTIME`)
 * @throws when the application has no KeyflowWorkerModule, or the transport cannot start (a Kafka, registry or
 *   Redis error after KEYFLOW_STARTUP_TIMEOUT_MS)
 */
export async function startKeyflowWorker(app: INestApplication): Promise<WorkerRuntime> {
  const rt = app.get<WorkerRuntime>(WORKER_RUNTIME);
  // Not inheriting the application's configuration: its global filters, guards, pipes and interceptors are for its
  // HTTP routes (a JWT guard would refuse every task); @TaskHandler carries the handlers' own filter.
  app.connectMicroservice({ strategy: rt.transport }, { inheritAppConfig: false });
  exitOnComponentFailure(rt.transport.health, rt.logger);
  await app.startAllMicroservices();
  return rt;
}
