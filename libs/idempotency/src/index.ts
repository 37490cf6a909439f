export {
  BATCH_MAX_KEYS,
  IdempotencyStore,
  IdempotencyStoreUnavailableError,
  IdempotencyStoreFullError,
  ForeignRecordError,
  idempotencyKeyPrefix,
  DEFAULT_COMPLETION_TTL_MS,
} from './store';
export type { BeginResult, Lease, IdempotencyStoreOptions, RecordState } from './store';
export { checkRedisPersistence, longestSnapshotIntervalS, type RedisPersistence } from './persistence';
export {
  checkRedisMemoryPolicy,
  IdempotencyStoreEvictsError,
  NO_EVICTION,
  requireNoEviction,
  type RedisMemoryPolicy,
} from './memory';
export {
  createRedis,
  describeRedis,
  redisConnectionFromEnv,
  RedisConnectionConfigError,
  type RedisConnection,
} from './connection';
export {
  brokerList,
  CONNECTION_ENV,
  connectionSettingsFromEnv,
  type ConnectionSettings,
} from './connections';
