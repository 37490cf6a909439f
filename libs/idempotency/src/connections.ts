import { SettingsError } from '@keyflow/errors';
import { registryConnectionFromEnv, type RegistryConnection } from '@keyflow/contracts';
import { kafkaSecurityFromEnv, type KafkaSecurity } from '@keyflow/kafka';
import { redisConnectionFromEnv, type RedisConnection } from './connection';
import { z } from 'zod';

/**
 * The connection variables every keyflow service reads, as one zod shape that both services' settings schemas and the
 * CLI's spread (so each variable, its rule and its error message are written once): Kafka's brokers, the schema
 * registry (URL, basic auth, CA), the topic prefix and Redis (URL, password file, TLS files).
 *
 * The zod rules here are the per-variable ones (KAFKA_BROKERS and SCHEMA_REGISTRY_URL required, the URLs' forms); the
 * rules across variables and the reading of files (a user without a password, a CA file with an http:// URL, an
 * unreadable PEM file) are {@link connectionSettingsFromEnv}'s, as are the Kafka TLS/SASL settings (@keyflow/kafka
 * kafkaSecurityFromEnv). REDIS_URL is optional here: the orchestrator needs it only to serve its API, the workers'
 * schema requires it (`CONNECTION_ENV.REDIS_URL.unwrap()`).
 */
export const CONNECTION_ENV = {
  /** Kafka bootstrap brokers: a comma-separated `host:port` list. */
  KAFKA_BROKERS: z.string().min(1, 'comma-separated host:port list'),
  /** The schema registry's Confluent-compatible API URL (Apicurio: `.../apis/ccompat/v7`). */
  SCHEMA_REGISTRY_URL: z.string().url(),
  /**
   * User of the registry's HTTP basic auth (RFC 7617; the Confluent clients' `basic.auth.user.info`), with
   * SCHEMA_REGISTRY_PASSWORD or SCHEMA_REGISTRY_PASSWORD_FILE. Credentials in SCHEMA_REGISTRY_URL count as these.
   */
  SCHEMA_REGISTRY_USERNAME: z.string().optional(),
  /** Password of SCHEMA_REGISTRY_USERNAME; or SCHEMA_REGISTRY_PASSWORD_FILE, not both. */
  SCHEMA_REGISTRY_PASSWORD: z.string().optional(),
  /** A file holding the password of SCHEMA_REGISTRY_USERNAME (a mounted secret). */
  SCHEMA_REGISTRY_PASSWORD_FILE: z.string().optional(),
  /** PEM file of the CA(s) an https:// registry's certificate chains to (default: Node's CAs); https:// only. */
  SCHEMA_REGISTRY_CA_FILE: z.string().optional(),
  /** Prefix of every physical topic name (and of group ids' topics), e.g. `team-a.`; default none. */
  KEYFLOW_TOPIC_PREFIX: z.string().default(''),
  /**
   * Redis (`redis://[user[:password]@]host:port[/db]`, or `rediss://` for TLS): the workers keep idempotency records,
   * leases and fences in it (required by the workers); the orchestrator's API keeps Idempotency-Keys (key, request
   * fingerprint, run id) and webhook delivery ids in it, shared by every API instance (required to serve the API:
   * `requireApiSettings`; the rebuild CLI does without).
   */
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\//, 'a redis:// URL')
    .optional(),
  /** A file holding the Redis password (AUTH; Redis docs "ACL"), instead of one in REDIS_URL. */
  REDIS_PASSWORD_FILE: z.string().optional(),
  /** PEM file of the CA(s) the Redis server's certificate chains to (default: Node's CAs); rediss:// only. */
  REDIS_TLS_CA_FILE: z.string().optional(),
  /** PEM client certificate for a Redis server with `tls-auth-clients yes`, with REDIS_TLS_KEY_FILE; rediss:// only. */
  REDIS_TLS_CERT_FILE: z.string().optional(),
  /** PEM key of REDIS_TLS_CERT_FILE; rediss:// only. */
  REDIS_TLS_KEY_FILE: z.string().optional(),
};

/** KAFKA_BROKERS as a list: split at commas, trimmed, empty entries dropped. */
export const brokerList = (kafkaBrokers: string): string[] =>
  kafkaBrokers
    .split(',')
    .map((b) => b.trim())
    .filter(Boolean);

/** The three connections a keyflow service makes, as the environment sets them (each checked at startup). */
export interface ConnectionSettings {
  kafkaSecurity: KafkaSecurity;
  registry: RegistryConnection;
  /** Undefined when `redisUrl` is not given. */
  redis?: RedisConnection;
}

/**
 * Kafka (@keyflow/kafka kafkaSecurityFromEnv), schema registry (libs/contracts registryConnectionFromEnv) and, given its URL, Redis
 * (./connection redisConnectionFromEnv) settings of `env`, all checked before any of them is used.
 * @returns the settings, or `{ issues }` naming every setting of the three that cannot work (none is thrown, so a
 *   service reports them in its own configuration error beside its other settings' issues)
 */
export function connectionSettingsFromEnv(
  env: NodeJS.ProcessEnv,
  redisUrl?: string,
): ConnectionSettings | { issues: string[] } {
  const issues: string[] = [];
  const attempt = <T>(f: () => T): T | undefined => {
    try {
      return f();
    } catch (e) {
      if (!(e instanceof SettingsError)) throw e;
      issues.push(...e.issues);
      return undefined;
    }
  };
  const kafkaSecurity = attempt(() => kafkaSecurityFromEnv(env));
  const registry = attempt(() => registryConnectionFromEnv(env));
  const redis = redisUrl ? attempt(() => redisConnectionFromEnv(redisUrl, env)) : undefined;
  if (issues.length > 0 || !kafkaSecurity || !registry) return { issues };
  return { kafkaSecurity, registry, ...(redis ? { redis } : {}) };
}
