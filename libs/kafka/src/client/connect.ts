import { STARTUP_TIMEOUT_MS } from './options';
import type { Logger } from '@keyflow/observability';

/**
 * Whether a kafkajs error may go away by itself: its `retriable` flag (set per broker error code, and on connection
 * errors), or kafkajs's own retries ran out (`KafkaJSNumberOfRetriesExceeded`, whose cause was retriable).
 */
export function isRetriableKafkaError(err: unknown): boolean {
  const e = err as { name?: unknown; retriable?: unknown } | null;
  return e?.name === 'KafkaJSNumberOfRetriesExceeded' || e?.retriable === true;
}

/**
 * Connects a kafkajs producer, consumer or admin client, again while it fails with a retriable error, until the
 * deadline (default {@link STARTUP_TIMEOUT_MS}).
 *
 * Why: an idempotent or transactional kafkajs producer sends InitProducerId to one broker chosen from its cached
 * metadata (a non-transactional one to the "controller", which a KRaft broker picks at random among the brokers it
 * believes alive) and gives up on the first refused connection (kafkajs 2.2.4 `eosManager.initProducerId` bails on
 * anything but a listed protocol error). For some seconds after a broker dies the cluster's metadata still names it,
 * so a service starting then failed to start although two of three brokers answered (the same gap as
 * librdkafka#3848). Each failed try disconnects the client, which drops kafkajs's cached metadata: the next try asks
 * the cluster again.
 * @throws the first non-retriable kafkajs error, or the last one once the deadline has passed
 */
export async function connectUntilAnswered(
  client: { connect(): Promise<void>; disconnect(): Promise<void> },
  o: {
    /** Named in the log lines, e.g. `engine timer producer`. */
    what: string;
    logger: Logger;
    /** Give up after this many ms from the first try (default {@link STARTUP_TIMEOUT_MS}). */
    deadlineMs?: number;
    /** First wait between tries in ms, doubled up to 5 000 (default 250). */
    initialDelayMs?: number;
  },
): Promise<void> {
  return untilAnswered(() => client.connect(), {
    ...o,
    failed: 'could not connect',
    beforeRetry: () => client.disconnect().catch(() => undefined),
  });
}

/**
 * Runs `f` again while it fails with a retriable kafkajs error ({@link isRetriableKafkaError}: a partition without a
 * leader right after its topic was created, NOT_LEADER_FOR_PARTITION, a broker away), waiting 250 ms doubled up to
 * 5 000 between tries, until the deadline (default {@link STARTUP_TIMEOUT_MS}, ms). Each retry is logged as a warning
 * naming `what`.
 * @returns what `f` resolved with
 * @throws the first non-retriable error, or the last one once the deadline has passed
 */
export async function untilAnswered<T>(
  f: () => Promise<T>,
  o: {
    what: string;
    logger: Logger;
    deadlineMs?: number;
    initialDelayMs?: number;
    /** What the log line says happened (default `failed`). */
    failed?: string;
    /** Run before each new try (e.g. disconnecting a client, which drops kafkajs's cached metadata). */
    beforeRetry?: () => Promise<unknown>;
  },
): Promise<T> {
  const deadline = Date.now() + (o.deadlineMs ?? STARTUP_TIMEOUT_MS);
  for (let attempt = 1, delay = o.initialDelayMs ?? 250; ; attempt++, delay = Math.min(delay * 2, 5_000)) {
    try {
      return await f();
    } catch (err) {
      if (!isRetriableKafkaError(err) || Date.now() + delay > deadline) throw err;
      o.logger.warn({ err, attempt, retryInMs: delay }, `${o.what}: ${o.failed ?? 'failed'}; trying again`);
      await o.beforeRetry?.();
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}
