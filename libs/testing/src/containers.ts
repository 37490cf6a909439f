import type { StartedTestContainer } from 'testcontainers';
import type { InfraEndpoints } from './infra';

/**
 * The Docker path: the same Kafka version as `infra/local` (apache/kafka, KRaft), Apicurio Registry and Redis,
 * started with testcontainers. Not exercised by CI on this project's machines (they have no Docker engine).
 * Images are configurable with KAFKA_IMAGE, REGISTRY_IMAGE, REDIS_IMAGE.
 */
export interface StartedInfra {
  endpoints: InfraEndpoints;
  stop(): Promise<void>;
}

/** `true` when testcontainers can reach a container runtime. Never throws. */
export async function dockerAvailable(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

export async function startContainers(): Promise<StartedInfra> {
  const { GenericContainer, Wait } = await import('testcontainers');
  const kafkaPort = 9092;
  const kafka = await new GenericContainer(process.env.KAFKA_IMAGE ?? 'apache/kafka:4.1.1')
    .withExposedPorts({ container: kafkaPort, host: 39092 })
    .withEnvironment({
      KAFKA_NODE_ID: '1',
      KAFKA_PROCESS_ROLES: 'broker,controller',
      KAFKA_LISTENERS: 'PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093',
      KAFKA_ADVERTISED_LISTENERS: 'PLAINTEXT://127.0.0.1:39092',
      KAFKA_CONTROLLER_LISTENER_NAMES: 'CONTROLLER',
      KAFKA_CONTROLLER_QUORUM_VOTERS: '1@localhost:9093',
      KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR: '1',
      KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR: '1',
      KAFKA_TRANSACTION_STATE_LOG_MIN_ISR: '1',
      KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR: '1',
      KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR: '1',
      KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS: '0',
      KAFKA_AUTO_CREATE_TOPICS_ENABLE: 'false',
    })
    .withWaitStrategy(Wait.forLogMessage(/Kafka Server started/))
    .start();
  const registry = await new GenericContainer(
    process.env.REGISTRY_IMAGE ?? 'apicurio/apicurio-registry:3.0.9',
  )
    .withExposedPorts(8080)
    .withEnvironment({ APICURIO_CCOMPAT_USE_CANONICAL_HASH: 'true' })
    .withWaitStrategy(Wait.forHttp('/apis/ccompat/v7/subjects', 8080))
    .start();
  const redis = await new GenericContainer(process.env.REDIS_IMAGE ?? 'redis:7-alpine')
    .withExposedPorts(6379)
    .withWaitStrategy(Wait.forLogMessage(/Ready to accept connections/))
    .start();
  const started: StartedTestContainer[] = [kafka, registry, redis];
  return {
    endpoints: {
      kafkaBrokers: [`127.0.0.1:${kafka.getMappedPort(kafkaPort)}`],
      schemaRegistryUrl: `http://${registry.getHost()}:${registry.getMappedPort(8080)}/apis/ccompat/v7`,
      redisUrl: `redis://${redis.getHost()}:${redis.getMappedPort(6379)}`,
      source: 'testcontainers',
    },
    stop: async () => {
      await Promise.allSettled(started.map((c) => c.stop()));
    },
  };
}
