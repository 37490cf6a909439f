import 'reflect-metadata';
import { Module, type DynamicModule, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  createLogger,
  createMetricsRegistry,
  exitOnComponentFailure,
  exitOnSignals,
  startTracing,
} from '@keyflow/observability';
import { describeKafkaSecurity } from '@keyflow/kafka';
import { describeRedis } from '@keyflow/idempotency';
import { loadWorkerConfig, type WorkerConfig } from './config';
import { HealthController, METRICS_REGISTRY } from './health.controller';
import { KafkaTaskTransport } from './transport/kafka-task.transport';
import { PassThroughRpcFilter } from './transport/pass-through.filter';
import { EventPublisher } from './runtime/event-publisher';
import { BLOB_STORE } from './runtime/blob-store';

/**
 * Starts a worker: an HTTP app (GET /health, GET /metrics) with the Kafka task transport connected as a
 * microservice. `handlers` are the NestJS providers whose methods carry @TaskHandler.
 * When the consumer crashes for good or the result producer fails for good, /health answers 503 naming it and the
 * process exits 1 shortly after (KEYFLOW_FATAL_EXIT_DELAY_MS), so a supervisor restarts it (it never sits alive and
 * idle). Warns at startup when the idempotency store's Redis persists nothing (/health says so too).
 */
export async function bootstrapWorker(handlers: Array<Type<unknown>>, env: NodeJS.ProcessEnv = process.env) {
  const cfg: WorkerConfig = loadWorkerConfig(env);
  // Before anything makes a span: OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set (README "Tracing").
  const tracing = startTracing('keyflow-worker', env);
  const logger = createLogger('workers');
  const registry = createMetricsRegistry('workers');
  const publisher = new EventPublisher();
  const transport = new KafkaTaskTransport(cfg, logger, registry, publisher);

  @Module({})
  class WorkersModule {
    static register(): DynamicModule {
      return {
        module: WorkersModule,
        controllers: [HealthController, ...handlers],
        providers: [
          { provide: KafkaTaskTransport, useValue: transport },
          { provide: METRICS_REGISTRY, useValue: registry },
          { provide: EventPublisher, useValue: publisher },
          { provide: BLOB_STORE, useValue: transport.blobs },
        ],
      };
    }
  }

  const app = await NestFactory.create(WorkersModule.register(), { logger: ['error', 'warn'] });
  // Filters are registered on the app and inherited by the microservice (Nest applies them only this way).
  app.useGlobalFilters(new PassThroughRpcFilter(app.getHttpAdapter()));
  app.connectMicroservice({ strategy: transport }, { inheritAppConfig: true });
  // SIGTERM/SIGINT: drain (transport.close via app.close), then exit 0. Nest's own hooks would re-raise the signal.
  exitOnSignals(logger, 'shutting down: draining in-flight tasks', () =>
    app.close().then(() => tracing.shutdown()),
  );
  exitOnComponentFailure(transport.health, logger);
  await app.startAllMicroservices();
  await app.listen(cfg.WORKER_HTTP_PORT, '127.0.0.1');
  const url = await app.getUrl();
  logger.info(
    {
      http: url,
      groupId: cfg.WORKER_GROUP_ID,
      blobs: transport.blobs.describe,
      kafka: describeKafkaSecurity(cfg.kafkaSecurity),
      redis: describeRedis(cfg.redis),
      tracing: tracing.exporting ? 'otlp' : 'off',
    },
    'worker ready',
  );
  return { app, transport, url, cfg };
}
