import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { infraFromEnv, InfraUnavailableError } from './infra';
import { dockerAvailable, startContainers, type StartedInfra } from './containers';

declare global {
  var __KEYFLOW_CONTAINERS__: StartedInfra | undefined;
}

/**
 * Jest global setup for integration suites: endpoints from the environment, else containers, else a clear error.
 * Test workers are forked after this runs, so the variables set here reach them.
 */
export default async function globalSetup(): Promise<void> {
  // Node's on-disk code cache for every process the tests start (services, CLI, examples; they inherit it): each
  // service start loads some 2,000 modules, and V8 compiling them afresh took 0.4 of its 1.3 s (measured with
  // `require('@keyflow/orchestrator'); require('@keyflow/workers')`, 2026-12-07). Keyed on each file's content, so a
  // changed file is compiled again; written when a process exits on its own (not after SIGKILL).
  process.env.NODE_COMPILE_CACHE ??= join(tmpdir(), 'keyflow-test-compile-cache');
  const fromEnv = infraFromEnv();
  if (fromEnv) return;
  if (await dockerAvailable()) {
    const started = await startContainers();
    globalThis.__KEYFLOW_CONTAINERS__ = started;
    process.env.KAFKA_BROKERS = started.endpoints.kafkaBrokers.join(',');
    process.env.SCHEMA_REGISTRY_URL = started.endpoints.schemaRegistryUrl;
    process.env.REDIS_URL = started.endpoints.redisUrl;
    process.env.KEYFLOW_INFRA_SOURCE = 'testcontainers';
    return;
  }
  throw new InfraUnavailableError(
    'KAFKA_BROKERS, SCHEMA_REGISTRY_URL and REDIS_URL are not all set, and no Docker engine answers',
  );
}
