export {
  BATCH_MAX_KEYS,
  IdempotencyStore,
  IdempotencyStoreUnavailableError,
  ForeignRecordError,
  idempotencyKeyPrefix,
  DEFAULT_COMPLETION_TTL_MS,
} from './store';
export type { BeginResult, Lease, IdempotencyStoreOptions, RecordState } from './store';
export { checkRedisPersistence, type RedisPersistence } from './persistence';
export {
  createRedis,
  describeRedis,
  redisConnectionFromEnv,
  RedisConnectionConfigError,
  type RedisConnection,
} from './connection';
