export {
  createKafka,
  createIdempotentProducer,
  whileTransactionsConcurrent,
  sendOffsetsFirst,
  FIRST_REQUEST_TRIES,
  sendWithOffsets,
  isTooLarge,
  RECORD_TOO_LARGE,
} from './client';
export { assertKafkajsPatched, KafkajsUnpatchedError, KAFKAJS_PATCHES } from './kafkajs-patch';
export { connectUntilAnswered, isRetriableKafkaError, untilAnswered } from './connect';
export { describeKafkaSecurity, KafkaSecurityConfigError, kafkaSecurityFromEnv } from './security';
export type { KafkaSecurity, KafkaSecurityProtocol } from './types';
export {
  blankAsUnset,
  unsetWhenEmpty,
  KAFKA_SASL_MECHANISMS,
  KAFKA_SECURITY_PROTOCOLS,
  STARTUP_TIMEOUT_MS,
  TRANSACTIONAL_RETRY,
} from './options';
export { abortableSleep, linkSignals } from './sleep';
