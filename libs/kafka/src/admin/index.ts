export {
  ensureTopics,
  subscribeWhenReady,
  retryWhileTopicsSettle,
  partitionCounts,
  assertCoPartitioned,
  PartitionCountMismatchError,
  TopicsStillMissingError,
  effectiveReplication,
  topicCreation,
  assertGroupIdMigrated,
  GroupIdMigrationError,
} from './topics';
export type { TopicSpec, EffectiveReplication } from './types';
export { DEFAULT_GROUP_IDS, defaultGroupId } from './options';
