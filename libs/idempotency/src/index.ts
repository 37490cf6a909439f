export { IdempotencyStore, IdempotencyStoreUnavailableError } from './store';
export type { BeginResult, Lease, IdempotencyStoreOptions } from './store';
