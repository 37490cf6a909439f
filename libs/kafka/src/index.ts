/**
 * @keyflow/kafka: the Kafka client keyflow runs on (kafkajs 2.2.4, patched), and nothing keyflow-specific beyond it.
 * - client: the configured client and idempotent producer, security settings, startup retries, the kafkajs patch check
 * - consumer: the ordered consumer (per-key order, bounded in-flight, drain), its assigners and offset tracking
 * - producer: the batching producer, the Java-compatible partitioner, write compression, producer health
 * - admin: topic creation and checks, consumer group ids
 * - codecs: the compression codecs and the decompression limit
 * DLQ writing, redrive, the DLQ ledger, scans and lag live in @keyflow/ops.
 */
export * from './client';
export * from './consumer';
export * from './producer';
export * from './admin';
export * from './codecs';
export { isConsumerGroupNotInitialized, isTopicSettling } from './kafka-errors';
/**
 * The kafkajs this library runs on (2.2.4 with the project's patches, see ./kafkajs-patch), for code that needs its
 * classes or types: import them from here, never from `kafkajs` itself, so one copy of kafkajs is loaded (the
 * published @keyflow/kafka bundles the patched copy; `instanceof KafkaJSError` holds only within one copy).
 */
export {
  AssignerProtocol,
  CompressionCodecs,
  CompressionTypes,
  ConfigResourceTypes,
  Kafka,
  KafkaJSConnectionError,
  KafkaJSError,
  KafkaJSNumberOfRetriesExceeded,
  logLevel,
  Partitioners,
} from 'kafkajs';
export type {
  Admin,
  Batch,
  Consumer,
  EachBatchPayload,
  IHeaders,
  ITopicConfig,
  KafkaMessage,
  Message,
  Producer,
} from 'kafkajs';
