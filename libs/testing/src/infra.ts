import { KeyflowError, retryableOf } from '@keyflow/errors';
/**
 * Where the integration tests' Kafka broker, schema registry and Redis come from.
 *
 * Order (one harness for both paths):
 *  1. The environment: `KAFKA_BROKERS` (comma-separated host:port), `SCHEMA_REGISTRY_URL`
 *     (Confluent-compatible base URL, e.g. Apicurio's `/apis/ccompat/v7`) and `REDIS_URL`, all three set.
 *     `infra/local/stack.sh up` starts these as local processes and prints the exports.
 *  2. Testcontainers, when a Docker engine answers (see `containers.ts`).
 *  3. Otherwise {@link InfraUnavailableError}, which says how to start the local stack.
 */
export interface InfraEndpoints {
  /** Bootstrap servers, `host:port`. */
  kafkaBrokers: string[];
  /** Confluent-compatible schema registry base URL. */
  schemaRegistryUrl: string;
  /** `redis://host:port[/db]`. */
  redisUrl: string;
  /** Which path provided them. */
  source: 'env' | 'testcontainers';
}

/** No endpoints in the environment and no Docker engine to start containers. Not retryable. */
export class InfraUnavailableError extends KeyflowError {
  readonly code = 'INFRA_UNAVAILABLE';
  readonly retryable = retryableOf('INFRA_UNAVAILABLE');
  constructor(detail: string) {
    super(
      `Integration tests need Kafka, a schema registry and Redis, and none were found: ${detail}.\n` +
        `Start the local stack (no Docker needed) with:\n` +
        `  eval "$(infra/local/stack.sh up)"\n` +
        `or run the whole suite, which starts and stops it for you:\n` +
        `  npm test`,
    );
  }
}

export const ENV_KEYS = ['KAFKA_BROKERS', 'SCHEMA_REGISTRY_URL', 'REDIS_URL'] as const;

/** Reads the endpoints from the environment; `undefined` when any of the three is missing. */
export function infraFromEnv(env: NodeJS.ProcessEnv = process.env): InfraEndpoints | undefined {
  const brokers = env.KAFKA_BROKERS?.trim();
  const registry = env.SCHEMA_REGISTRY_URL?.trim();
  const redis = env.REDIS_URL?.trim();
  if (!brokers || !registry || !redis) return undefined;
  return {
    kafkaBrokers: brokers
      .split(',')
      .map((b) => b.trim())
      .filter(Boolean),
    schemaRegistryUrl: registry.replace(/\/+$/, ''),
    redisUrl: redis,
    source: env.KEYFLOW_INFRA_SOURCE === 'testcontainers' ? 'testcontainers' : 'env',
  };
}

/**
 * The endpoints for a test file. Jest's global setup has already put them in the environment
 * (from the environment itself or from containers it started), so this only reads them back.
 * @throws InfraUnavailableError when the global setup found nothing.
 */
export function testInfra(): InfraEndpoints {
  const found = infraFromEnv();
  if (!found)
    throw new InfraUnavailableError(`missing ${ENV_KEYS.filter((k) => !process.env[k]).join(', ')}`);
  return found;
}
