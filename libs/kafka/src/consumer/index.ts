export { ConsumerStoppingError, OrderedConsumer, PartitionRevokedError } from './ordered-consumer';
export type { ConsumedMessage, HandleContext, MessageHandler, ConsumerStats } from './types';
export type { OrderedConsumerOptions, BackoffPolicy } from './options';
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
export {
  assignSubscribed,
  subscribedRoundRobinAssigner,
  SUBSCRIBED_ASSIGNER,
  type SubscribedMember,
} from './subscribed-assigner';
export { OffsetTracker } from './offset-tracker';
export { Semaphore } from './semaphore';
export type { SlotWait } from './semaphore';
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
