import { Kafka, logLevel, Partitioners, type KafkaConfig, type Producer } from 'kafkajs';
import type { Logger } from '@keyflow/observability';
// For its effect: registers the snappy, lz4 and zstd codecs with kafkajs for every client of the project.
import './codecs';
import { assertKafkajsPatched } from './kafkajs-patch';
import type { KafkaSecurity } from './security';

const LEVELS: Record<number, 'error' | 'warn' | 'info' | 'debug'> = {
  [logLevel.ERROR]: 'error',
  [logLevel.WARN]: 'warn',
  [logLevel.INFO]: 'info',
  [logLevel.DEBUG]: 'debug',
};

/**
 * A kafkajs client whose own logs go to our structured logger (WARN and above by default), connecting with
 * `security` (TLS and SASL, see ./security; plaintext when absent).
 * @throws KafkajsUnpatchedError when kafkajs lacks the project's patch (see ./kafkajs-patch)
 */
export function createKafka(
  opts: {
    brokers: string[];
    clientId: string;
    logger: Logger;
    level?: logLevel;
    security?: KafkaSecurity;
  } & Partial<KafkaConfig>,
): Kafka {
  assertKafkajsPatched();
  const { brokers, clientId, logger, level, security, ...rest } = opts;
  return new Kafka({
    ...(security?.ssl ? { ssl: security.ssl } : {}),
    ...(security?.sasl ? { sasl: security.sasl } : {}),
    brokers,
    clientId,
    logLevel: level ?? logLevel.WARN,
    retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 5_000 },
    logCreator: () => (entry) => {
      const { message, ...extra } = entry.log;
      logger[LEVELS[entry.level] ?? 'info']({ kafkajs: entry.namespace, ...extra }, message);
    },
    ...rest,
  });
}

/**
 * The producer every service uses for events: idempotent (KIP-98: no duplicates or reordering from producer
 * retries), acks=all on every send (set per send), one request in flight per connection to keep order on retries.
 */
export function createIdempotentProducer(kafka: Kafka, transactionalId?: string): Producer {
  return kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    // murmur2 over the key, as the Java client: other clients put the same key in the same partition.
    createPartitioner: Partitioners.DefaultPartitioner,
    // An idempotent producer keeps retrying while the broker is away (bounded waits, unbounded count).
    retry: { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 100, maxRetryTime: 5_000 },
    ...(transactionalId ? { transactionalId } : {}),
  });
}
