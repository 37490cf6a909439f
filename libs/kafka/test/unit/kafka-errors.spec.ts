import * as kafkajs from 'kafkajs';
import {
  KafkaJSAggregateError,
  KafkaJSNonRetriableError,
  KafkaJSNumberOfRetriesExceeded,
  KafkaJSProtocolError,
} from 'kafkajs';
import {
  isConsumerGroupNotInitialized,
  isTopicSettling,
  retryWhileTopicsSettle,
  TopicsStillMissingError,
} from '../../src';

/** kafkajs's per-topic error of a CreateTopics answer (a KafkaJSProtocolError; exported, not in its typings). */
const { KafkaJSCreateTopicError } = kafkajs as unknown as {
  KafkaJSCreateTopicError: new (e: Error, topic: string) => KafkaJSProtocolError;
};

/** kafkajs's protocol error of a broker error code, as src/protocol/error.js makes it (createErrorFromCode). */
const protocolError = (type: string, code: number, message = 'any text') =>
  new KafkaJSProtocolError(Object.assign(new Error(message), { type, code, retriable: true }) as never);

describe('kafkajs errors, classified by class and protocol error type (never by message text)', () => {
  it('a topic whose metadata lags its creation (UNKNOWN_TOPIC_OR_PARTITION, code 3) is settling', () => {
    expect(isTopicSettling(protocolError('UNKNOWN_TOPIC_OR_PARTITION', 3))).toBe(true);
  });

  it('a topic with no leader yet (LEADER_NOT_AVAILABLE, code 5) is settling', () => {
    expect(isTopicSettling(protocolError('LEADER_NOT_AVAILABLE', 5))).toBe(true);
  });

  it('a create that lost the race (TOPIC_ALREADY_EXISTS, code 36) is settling', () => {
    expect(isTopicSettling(protocolError('TOPIC_ALREADY_EXISTS', 36))).toBe(true);
  });

  it("a CreateTopics answer's errors (KafkaJSAggregateError of KafkaJSCreateTopicError) are settling", () => {
    const perTopic = new KafkaJSCreateTopicError(
      Object.assign(new Error('x'), { type: 'TOPIC_ALREADY_EXISTS', code: 36 }),
      'wf.requests',
    );
    expect(isTopicSettling(new KafkaJSAggregateError('Topic creation errors', [perTopic]))).toBe(true);
  });

  it("the retrier's wrappers are read through their cause (KafkaJSNumberOfRetriesExceeded, KafkaJSNonRetriableError)", () => {
    const cause = protocolError('UNKNOWN_TOPIC_OR_PARTITION', 3);
    const exceeded = new KafkaJSNumberOfRetriesExceeded(cause, { retryCount: 5, retryTime: 100 } as never);
    expect(isTopicSettling(exceeded)).toBe(true);
    // kafkajs's typings declare one argument; at runtime it takes (error, { cause }), as its retrier calls it.
    const NonRetriable = KafkaJSNonRetriableError as unknown as new (
      e: Error,
      m: { cause: Error },
    ) => KafkaJSNonRetriableError;
    expect(isTopicSettling(new NonRetriable(cause, { cause }))).toBe(true);
  });

  it('another protocol error, or a message that only reads like one, is not settling', () => {
    expect(isTopicSettling(protocolError('TOPIC_AUTHORIZATION_FAILED', 29))).toBe(false);
    expect(isTopicSettling(new Error('This server does not host this topic-partition'))).toBe(false);
    expect(isTopicSettling(protocolError('POLICY_VIOLATION', 44, 'UNKNOWN_TOPIC already exists'))).toBe(
      false,
    );
    expect(isTopicSettling(undefined)).toBe(false);
  });

  it('retryWhileTopicsSettle retries settling errors and its own TopicsStillMissingError, and throws others at once', async () => {
    let n = 0;
    await expect(
      retryWhileTopicsSettle(async () => {
        n++;
        if (n === 1) throw protocolError('LEADER_NOT_AVAILABLE', 5);
        if (n === 2) throw new TopicsStillMissingError(['wf.state']);
        return 'ok';
      }),
    ).resolves.toBe('ok');
    const other = protocolError('TOPIC_AUTHORIZATION_FAILED', 29);
    await expect(retryWhileTopicsSettle(() => Promise.reject(other))).rejects.toBe(other);
    expect(new TopicsStillMissingError(['a', 'b']).message).toBe(
      'UNKNOWN_TOPIC: still missing after create: a, b',
    );
  });

  it("pause/resume's refusal without a consumer group is the plain KafkaJSNonRetriableError (not a subclass)", () => {
    expect(isConsumerGroupNotInitialized(new KafkaJSNonRetriableError('any text'))).toBe(true);
    const exceeded = new KafkaJSNumberOfRetriesExceeded(new Error('x'), {
      retryCount: 1,
      retryTime: 1,
    } as never);
    expect(isConsumerGroupNotInitialized(exceeded)).toBe(false);
    expect(isConsumerGroupNotInitialized(new Error('Consumer group was not initialized'))).toBe(false);
  });
});
