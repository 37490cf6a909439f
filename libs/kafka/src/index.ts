export {
  createKafka,
  createIdempotentProducer,
  TRANSACTIONAL_RETRY,
  whileTransactionsConcurrent,
} from './client';
export { assertKafkajsPatched, KafkajsUnpatchedError, KAFKAJS_PATCHES } from './kafkajs-patch';
export {
  ensureTopics,
  subscribeWhenReady,
  retryWhileTopicsSettle,
  partitionCounts,
  assertCoPartitioned,
  PartitionCountMismatchError,
  effectiveReplication,
  topicCreation,
  type TopicSpec,
  type EffectiveReplication,
  DEFAULT_GROUP_IDS,
  defaultGroupId,
  assertGroupIdMigrated,
  GroupIdMigrationError,
  taskTypeOfTopic,
  isCatalogDlq,
  catalogDlqSource,
} from './topics';
export { ConsumerStoppingError, OrderedConsumer, PartitionRevokedError } from './ordered-consumer';
export {
  assignCoPartitioned,
  planCoPartitions,
  coPartitionedAssigner,
  encodeOwnedPartitions,
  decodeOwnedPartitions,
  CO_PARTITIONED_PROTOCOL,
  type CoPartitionMember,
  type CoPartitionedAssignment,
} from './co-partitioned-assigner';
export type {
  ConsumedMessage,
  HandleContext,
  MessageHandler,
  OrderedConsumerOptions,
  ConsumerStats,
} from './ordered-consumer';
export { OffsetTracker } from './offset-tracker';
export { Semaphore } from './semaphore';
export type { SlotWait } from './semaphore';
export { BatchingProducer, messageBytes, PRODUCE_REQUEST_MAX_BYTES } from './batching-producer';
export { abortableSleep, linkSignals } from './sleep';
export {
  dlqMessage,
  sendToDlq,
  redrive,
  matchesRedriveFilter,
  dlqTopicFor,
  dlqRecordId,
  header,
  DLQ_HEADERS,
  DLQ_ERROR_MESSAGE_MAX_BYTES,
  DLQ_HEADROOM_BYTES,
  dlqLimitBytes,
  dlqTopicConfigs,
  dlqRetention,
  alignDlqLimits,
  truncateUtf8,
  dlqStandIn,
  fitDlqRecord,
  RecordTooLargeError,
  REQUEST_RECORD_MAX_BYTES,
  SOCKET_REQUEST_MAX_BYTES,
  NOT_OWN_SOURCE,
  REPORT_RECORDS_MAX,
} from './dlq';
export {
  DLQ_LEDGER_TOPIC,
  DLQ_LEDGER_PARTITIONS,
  ensureDlqLedger,
  ledgerMessage,
  readDlqLedger,
  handledEntryOf,
  handledCountIn,
  DLQ_LEDGER_RETENTION_MS,
  handledBy,
  type HandledEntry,
  type DlqAction,
  type LedgerCodec,
} from './dlq-ledger';
export { describeDlqRecord, readDlqRecords, type DlqRecord } from './dlq-records';
export {
  lastStableOffsets,
  resumePosition,
  listDlqTopics,
  scanRanges,
  groupLag,
  summarizeDlqs,
  SCAN_GROUP_PREFIXES,
} from './scan';
export type { ScanRange, PartitionLag, DlqSummary } from './scan';
export type { DeadLetter, RedriveFilter, RedriveReport, RedriveRefusal, RedriveAdmit } from './dlq';
export { rerunAdmission, UNDECODABLE_COMMAND, type CheckedCommand } from './dlq-rerun';
export {
  assignSubscribed,
  subscribedRoundRobinAssigner,
  SUBSCRIBED_ASSIGNER,
  type SubscribedMember,
} from './subscribed-assigner';
export { watchProducer, isProducerFailure } from './producer-health';
export {
  registerCompressionCodecs,
  guardedCodec,
  UndecodableBatchError,
  undecodableBatchError,
  ZstdCompressionError,
  NODE_HAS_ZSTD,
  KAFKA_CODEC_IDS,
  type KafkaCodecName,
  type KafkaCodec,
} from './codecs';
export {
  MAX_DECOMPRESSED_BYTES_SETTING,
  DEFAULT_MAX_DECOMPRESSED_BYTES,
  DecompressionLimitConfigError,
  maxDecompressedBytes,
} from './decompression-limit';
export {
  COMPRESSION_SETTING,
  WRITE_CODECS,
  CompressionConfigError,
  compressionSetting,
  writeCompression,
} from './write-compression';
export {
  PartitionQuarantine,
  undecodableAt,
  undecodableBatchOf,
  standInRecords,
  UNDECODABLE_HEADER,
  UNDECODABLE_CODE,
  UNDECODABLE_RETRY_MS,
  type UndecodableBatch,
  type QuarantinedPartition,
  type PartitionSwitch,
} from './undecodable';
export { connectUntilAnswered, isRetriableKafkaError, STARTUP_TIMEOUT_MS, untilAnswered } from './connect';
export * from './security';
export {
  connectionSettingsFromEnv,
  CONNECTION_ENV,
  brokerList,
  type ConnectionSettings,
} from './connections';
/**
 * The kafkajs this library runs on (2.2.4 with the project's patches, see ./kafkajs-patch), for code that needs its
 * classes or types: import them from here, never from `kafkajs` itself, so one copy of kafkajs is loaded (the
 * published @keyflow/kafka bundles the patched copy; `instanceof KafkaJSError` holds only within one copy).
 */
export {
  AssignerProtocol,
  CompressionCodecs,
  CompressionTypes,
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
export { blankAsUnset, unsetWhenEmpty } from './settings';
export { JavaCompatiblePartitioner, keyPartition, murmur2 } from './partitioner';
