import { KafkaJSAggregateError, KafkaJSNonRetriableError, KafkaJSProtocolError } from 'kafkajs';

/**
 * Classifies kafkajs errors by class and protocol error type (kafkajs 2.2.4 src/errors.js, src/protocol/error.js),
 * never by message text.
 */

/**
 * Protocol error types of a topic that is being created (by this or another service): its metadata lags the
 * creation (UNKNOWN_TOPIC_OR_PARTITION, code 3), it has no leader yet (LEADER_NOT_AVAILABLE, code 5), or another
 * service's create won the race (TOPIC_ALREADY_EXISTS, code 36).
 */
const SETTLING_TYPES: ReadonlySet<string> = new Set([
  'UNKNOWN_TOPIC_OR_PARTITION',
  'LEADER_NOT_AVAILABLE',
  'TOPIC_ALREADY_EXISTS',
]);

/** How deep {@link isTopicSettling} follows `cause` (kafkajs wraps an error at most twice: retrier, then caller). */
const MAX_CAUSE_DEPTH = 5;

/**
 * Whether `e` says a topic creation has not settled yet, so the same admin call may succeed shortly: a
 * KafkaJSProtocolError (or KafkaJSCreateTopicError) of a type in {@link SETTLING_TYPES}, or a KafkaJSAggregateError
 * (kafkajs's "Topic creation errors" of a CreateTopics answer); also when the error kafkajs's retrier wrapped
 * (`cause` of a KafkaJSNumberOfRetriesExceeded or KafkaJSNonRetriableError) is one of these.
 */
export function isTopicSettling(e: unknown): boolean {
  let cur: unknown = e;
  for (let depth = 0; depth <= MAX_CAUSE_DEPTH && cur instanceof Error; depth++) {
    if (cur instanceof KafkaJSProtocolError && SETTLING_TYPES.has(cur.type)) return true;
    if (cur instanceof KafkaJSAggregateError) return true;
    cur = cur.cause;
  }
  return false;
}

/**
 * Whether `e` is kafkajs's refusal of `consumer.pause`/`resume` while the consumer has no group (between a crash it
 * restarts from and the restart): the plain KafkaJSNonRetriableError (not a subclass) those calls throw
 * (kafkajs 2.2.4 src/consumer/index.js). Given valid topic partitions, it is the only one they throw.
 */
export const isConsumerGroupNotInitialized = (e: unknown): boolean =>
  e instanceof KafkaJSNonRetriableError && Object.getPrototypeOf(e) === KafkaJSNonRetriableError.prototype;
