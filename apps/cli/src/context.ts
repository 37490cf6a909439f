import { z } from 'zod';
import { EventCodec, registryConnectionFromEnv } from '@keyflow/contracts';
import { createKafka, kafkaSecurityFromEnv } from '@keyflow/kafka';
import { createLogger, type Logger } from '@keyflow/observability';
import type { Kafka } from '@keyflow/kafka';
import { KeyflowError, type ErrorCode } from '@keyflow/errors';
import { brokerList, CONNECTION_ENV, DEFAULT_COMPLETION_TTL_MS } from '@keyflow/idempotency';

/**
 * What the CLI reads from the environment: the services' connection settings (CONNECTION_ENV, as `stack.sh env` sets
 * them) and its own. Each command asks for the connections it uses, so none is required here: KAFKA_BROKERS and
 * REDIS_URL are any string (unset or blank: the command that needs one says so, CliConfigError; a bad REDIS_URL is
 * refused by redisConnectionFromEnv when a command uses it), SCHEMA_REGISTRY_URL a URL when set.
 */
const EnvSchema = z.object({
  ...CONNECTION_ENV,
  KAFKA_BROKERS: z.string().optional(),
  SCHEMA_REGISTRY_URL: CONNECTION_ENV.SCHEMA_REGISTRY_URL.optional(),
  REDIS_URL: z.string().optional(),
  /** The orchestrator's HTTP API, e.g. http://127.0.0.1:3000 (npm start prints it). */
  KEYFLOW_API_URL: z.string().url().optional(),
  /** An API key of the orchestrator (its KEYFLOW_API_KEYS), sent as `Authorization: Bearer`; none: no header. */
  KEYFLOW_API_KEY: z.preprocess(
    (v) => (typeof v === 'string' && v.trim() === '' ? undefined : typeof v === 'string' ? v.trim() : v),
    z.string().optional(),
  ),
  LOG_LEVEL: z.string().default('warn'),
  /**
   * How long the workers keep completion records and fences, ms (the workers' own setting, read here to tell DLQ and
   * replayed records older than them: libs/workflow rerunVerdict).
   */
  WORKER_COMPLETION_TTL_MS: z.coerce.number().int().min(1000).default(DEFAULT_COMPLETION_TTL_MS),
});

/** Where the orchestrator's API is and the key it is called with. */
export interface ApiEndpoint {
  url: string;
  key?: string;
}

/** The CLI's error base: a machine-readable `code` and whether trying again may help (`retryable`). */
export class CliError extends KeyflowError {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly retryable = false,
  ) {
    super(message);
  }
}

/** A command's environment is missing or wrong: the message says which variable. Not retryable. */
export class CliConfigError extends CliError {
  constructor(message: string) {
    super('CLI_CONFIG', message);
  }
}

/** The connections a command asks for, made on first use from the environment (logs go to stderr). */
export class CliContext {
  readonly env = EnvSchema.parse(process.env);
  readonly logger: Logger = createLogger('keyflow-cli', { level: this.env.LOG_LEVEL, stream: 'stderr' });
  private kafkaClient?: Kafka;
  private codecClient?: EventCodec;

  /** Physical topic name of a logical one (`KEYFLOW_TOPIC_PREFIX` + name). */
  physical(logical: string): string {
    return `${this.env.KEYFLOW_TOPIC_PREFIX}${logical}`;
  }

  /** Logical topic name of a physical one, or undefined when it lacks the prefix. */
  logical(physical: string): string | undefined {
    const p = this.env.KEYFLOW_TOPIC_PREFIX;
    return physical.startsWith(p) ? physical.slice(p.length) : undefined;
  }

  /** @throws CliConfigError when KAFKA_BROKERS is not set */
  get kafka(): Kafka {
    const brokers = brokerList(this.env.KAFKA_BROKERS ?? '');
    if (!brokers.length)
      throw new CliConfigError(
        'KAFKA_BROKERS is not set (eval "$(infra/local/stack.sh env)" for the local stack)',
      );
    this.kafkaClient ??= createKafka({
      brokers,
      clientId: 'keyflow-cli',
      logger: this.logger,
      // The whole environment: this.env keeps only the CLI's own variables.
      security: kafkaSecurityFromEnv(process.env),
    });
    return this.kafkaClient;
  }

  /** The codec, or undefined when SCHEMA_REGISTRY_URL is not set (values are then shown as bytes). */
  get codec(): EventCodec | undefined {
    if (!this.env.SCHEMA_REGISTRY_URL) return undefined;
    this.codecClient ??= new EventCodec({
      ...registryConnectionFromEnv(process.env),
      topicPrefix: this.env.KEYFLOW_TOPIC_PREFIX,
    });
    return this.codecClient;
  }

  /** The codec. @throws CliConfigError when SCHEMA_REGISTRY_URL is not set */
  requireCodec(): EventCodec {
    const codec = this.codec;
    if (!codec)
      throw new CliConfigError(
        'SCHEMA_REGISTRY_URL is not set (eval "$(infra/local/stack.sh env)" for the local stack)',
      );
    return codec;
  }

  /**
   * The orchestrator's API: its URL (`--api` or KEYFLOW_API_URL) and the key to send (KEYFLOW_API_KEY, only to
   * KEYFLOW_API_URL's origin).
   * @throws CliConfigError when neither `--api` nor KEYFLOW_API_URL gives the URL
   */
  endpoint(option?: string): ApiEndpoint {
    const url = option ?? this.env.KEYFLOW_API_URL;
    if (!url)
      throw new CliConfigError('the orchestrator API is not known: pass --api <url> or set KEYFLOW_API_URL');
    // The key goes only where KEYFLOW_API_URL points: `--api` to another origin gets no key of this environment.
    const sameOrigin =
      this.env.KEYFLOW_API_URL !== undefined &&
      new URL(url).origin === new URL(this.env.KEYFLOW_API_URL).origin;
    return { url: url.replace(/\/+$/, ''), key: sameOrigin ? this.env.KEYFLOW_API_KEY : undefined };
  }
}
