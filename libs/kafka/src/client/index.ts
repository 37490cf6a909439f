export {
  createKafka,
  createIdempotentProducer,
  TRANSACTIONAL_RETRY,
  whileTransactionsConcurrent,
  isTooLarge,
  RECORD_TOO_LARGE,
} from './client';
export { assertKafkajsPatched, KafkajsUnpatchedError, KAFKAJS_PATCHES } from './kafkajs-patch';
export { connectUntilAnswered, isRetriableKafkaError, STARTUP_TIMEOUT_MS, untilAnswered } from './connect';
export * from './security';
export { blankAsUnset, unsetWhenEmpty } from './settings';
export { abortableSleep, linkSignals } from './sleep';
