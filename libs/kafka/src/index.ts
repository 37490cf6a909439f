export { createKafka, createIdempotentProducer } from './client';
export {
  ensureTopics,
  subscribeWhenReady,
  retryWhileTopicsSettle,
  partitionCounts,
  assertCoPartitioned,
  PartitionCountMismatchError,
  type TopicSpec,
} from './topics';
export { OrderedConsumer } from './ordered-consumer';
export type {
  ConsumedMessage,
  HandleContext,
  MessageHandler,
  OrderedConsumerOptions,
  ConsumerStats,
} from './ordered-consumer';
export { OffsetTracker } from './offset-tracker';
export { Semaphore } from './semaphore';
export { BatchingProducer } from './batching-producer';
export { abortableSleep } from './sleep';
export { dlqMessage, sendToDlq, redrive, dlqTopicFor, header, DLQ_HEADERS } from './dlq';
export type { DeadLetter, RedriveFilter, RedriveReport } from './dlq';
export { watchProducer, isProducerFailure } from './producer-health';
