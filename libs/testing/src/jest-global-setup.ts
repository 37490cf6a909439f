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
