export { IdempotencyStore, IdempotencyStoreUnavailableError, ForeignRecordError } from './store';
export type { BeginResult, Lease, IdempotencyStoreOptions } from './store';
export { checkRedisPersistence, type RedisPersistence } from './persistence';
