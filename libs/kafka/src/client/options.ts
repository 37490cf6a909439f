import type { KafkaConfig, logLevel } from 'kafkajs';
import { z } from 'zod';
import type { Logger } from '@keyflow/observability';
import type { KafkaSecurity } from './types';

/** What {@link createKafka} takes: the kafkajs config, plus our logger, log level and security settings. */
export type CreateKafkaOptions = {
  brokers: string[];
  clientId: string;
  logger: Logger;
  level?: logLevel;
  security?: KafkaSecurity;
} & Partial<KafkaConfig>;

/**
 * Retries of a transactional producer (kafkajs `retry`). A transaction begun right after the previous one committed
 * on the same transactional id has its first request (AddPartitionsToTxn, or AddOffsetsToTxn where the offsets go
 * first) refused with CONCURRENT_TRANSACTIONS while the coordinator still writes the previous one's markers (a few
 * ms after EndTxn returns); kafkajs retries a send after this retry backoff, whatever the error. The Java producer
 * retries that case after 20 ms instead of retry.backoff.ms (KAFKA-5477). On this project's single-broker stack
 * nearly every back-to-back transaction is refused at least once (`npm run bench:transaction`; BENCHMARKS.md,
 * "Latency"). 5 ms, doubling (with jitter) up to 5 s, unbounded count: a back-to-back transaction then takes
 * 9.5-10.4 ms p50 against 4.8-5.2 with a first wait of 1 ms, but the refused requests a shorter wait adds cost CPU,
 * and the engine from a backlog (every transaction back to back, the machine saturated) ran 5-6 % slower with 1 or
 * 2 ms, alternated six times each (docs/benchmarks/history.md, "Transaction round trips"). kafkajs applies it to
 * sends only: AddOffsetsToTxn is sent once (wrap `sendOffsets` in {@link whileTransactionsConcurrent}, or use
 * sendWithOffsets or sendOffsetsFirst, which do), InitProducerId and TxnOffsetCommit use the client's retry
 * (createKafka's).
 */
export const TRANSACTIONAL_RETRY = Object.freeze({
  retries: Number.MAX_SAFE_INTEGER,
  initialRetryTime: 5,
  maxRetryTime: 5_000,
});

/**
 * How long a service keeps trying to connect its Kafka clients at startup before it gives up and exits 1, in ms:
 * KEYFLOW_STARTUP_TIMEOUT_MS, else 60 000. Covers a broker's failover (the cluster fences a dead broker after
 * `broker.session.timeout.ms`, 9 s by default).
 */
export const STARTUP_TIMEOUT_MS = Number(process.env.KEYFLOW_STARTUP_TIMEOUT_MS ?? 60_000);

export const KAFKA_SECURITY_PROTOCOLS = ['PLAINTEXT', 'SSL', 'SASL_PLAINTEXT', 'SASL_SSL'] as const;
export const KAFKA_SASL_MECHANISMS = ['SCRAM-SHA-512', 'SCRAM-SHA-256', 'PLAIN'] as const;

const nonEmpty = z.string().trim().min(1).optional();
/** An empty variable (a template's `KAFKA_SSL_CA_FILE=`) counts as unset. */
export const unsetIfEmpty = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(env).filter(([k, v]) => !(k.startsWith('KAFKA_') && v?.trim() === '')));

/** The KAFKA_* security variables (see {@link KafkaSecurity} for their meaning and rules). */
export const SecuritySchema = z.object({
  KAFKA_SECURITY_PROTOCOL: z.enum(KAFKA_SECURITY_PROTOCOLS).default('PLAINTEXT'),
  KAFKA_SASL_MECHANISM: z.enum(KAFKA_SASL_MECHANISMS).optional(),
  KAFKA_SASL_USERNAME: nonEmpty,
  KAFKA_SASL_PASSWORD: z.string().min(1).optional(),
  KAFKA_SASL_PASSWORD_FILE: nonEmpty,
  KAFKA_SSL_CA_FILE: nonEmpty,
  KAFKA_SSL_CERT_FILE: nonEmpty,
  KAFKA_SSL_KEY_FILE: nonEmpty,
});

/**
 * `schema` as an optional setting of the services' environment schemas where a variable set to the empty string (or
 * blanks) counts as unset: compose files and `env:` lists pass unset variables through as "".
 */
export const blankAsUnset = <T extends z.ZodTypeAny>(schema: T) =>
  z.preprocess((v) => (typeof v === 'string' && v.trim() === '' ? undefined : v), schema.optional());

/** An optional string setting where blanks count as unset (see {@link blankAsUnset}). */
export const unsetWhenEmpty = blankAsUnset(z.string());
