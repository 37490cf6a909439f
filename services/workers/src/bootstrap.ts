import 'reflect-metadata';
import { Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { exitOnSignals } from '@keyflow/observability';
import { describeKafkaSecurity } from '@keyflow/kafka';
import { describeRedis } from '@keyflow/idempotency';
import { loadWorkerConfig } from './config';
import { KeyflowWorkerModule, startKeyflowWorker, WORKER_RUNTIME, type WorkerRuntime } from './module';

/**
 * Starts a worker as a process of its own: {@link KeyflowWorkerModule} with `handlers` (the classes whose methods
 * carry @TaskHandler), its HTTP app (GET /health, GET /metrics) on 127.0.0.1:WORKER_HTTP_PORT and the Kafka task
 * transport. SIGTERM/SIGINT drain in-flight tasks and exit 0. Warns at startup when the idempotency store's Redis
 * persists nothing (/health says so too).
 * @throws WorkerConfigError for settings that could never work
 */
export async function bootstrapWorker(handlers: Array<Type<unknown>>, env: NodeJS.ProcessEnv = process.env) {
  @Module({ imports: [KeyflowWorkerModule.forRoot({ env })], controllers: handlers })
  class WorkersModule {}

  // Settings first: a refused one is thrown here as it is, before Nest logs its own report of a failed provider.
  loadWorkerConfig(env);
  // abortOnError false: a setting refused at startup reaches the caller (main prints it and exits 1).
  const app = await NestFactory.create(WorkersModule, { logger: ['error', 'warn'], abortOnError: false });
  const rt = app.get<WorkerRuntime>(WORKER_RUNTIME);
  // SIGTERM/SIGINT, also while the transport starts: drain (transport.close via app.close), then exit 0. Nest's own
  // hooks would re-raise the signal.
  exitOnSignals(rt.logger, 'shutting down: draining in-flight tasks', () => app.close());
  await startKeyflowWorker(app);
  await app.listen(rt.cfg.WORKER_HTTP_PORT, '127.0.0.1');
  const url = await app.getUrl();
  rt.logger.info(
    {
      http: url,
      groupId: rt.cfg.WORKER_GROUP_ID,
      blobs: rt.transport.blobs.describe,
      kafka: describeKafkaSecurity(rt.cfg.kafkaSecurity),
      redis: describeRedis(rt.cfg.redis),
      tracing: rt.exportingTraces ? 'otlp' : 'off',
    },
    'worker ready',
  );
  return { app, transport: rt.transport, url, cfg: rt.cfg };
}
