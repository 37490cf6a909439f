import { SettingsError } from '@keyflow/errors';
import { registryConnectionFromEnv, type RegistryConnection } from '@keyflow/contracts';
import { kafkaSecurityFromEnv, type KafkaSecurity } from '@keyflow/kafka';
import { redisConnectionFromEnv, type RedisConnection } from './connection';
import { z } from 'zod';

/**
 * The connection variables every keyflow service reads, as one zod shape that both services' settings schemas spread
 * (so the rule and its error message are written once): KAFKA_BROKERS (comma-separated host:port list, required),
 * SCHEMA_REGISTRY_URL (a URL, required), KEYFLOW_TOPIC_PREFIX (prefix of physical topic names, default none). The
 * security, registry auth and Redis options come from {@link connectionSettingsFromEnv}.
 */
export const CONNECTION_ENV = {
  /** Kafka bootstrap brokers: a comma-separated `host:port` list. */
  KAFKA_BROKERS: z.string().min(1, 'comma-separated host:port list'),
  /** The schema registry's Confluent-compatible API URL (Apicurio: `.../apis/ccompat/v7`). */
  SCHEMA_REGISTRY_URL: z.string().url(),
  /** Prefix of every physical topic name (and of group ids' topics), e.g. `team-a.`; default none. */
  KEYFLOW_TOPIC_PREFIX: z.string().default(''),
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
