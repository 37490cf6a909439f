import type Redis from 'ioredis';
import { ReplyError } from 'ioredis';
import { KeyflowError, retryableOf } from '@keyflow/errors';
import { IdempotencyStoreUnavailableError } from './store';

/**
 * What a Redis does when it reaches `maxmemory`, as {@link checkRedisMemoryPolicy} found it (`INFO memory`, which
 * managed services answer even where CONFIG is refused).
 *
 * - `policy`: `maxmemory_policy` (`noeviction`, `volatile-lru`, `allkeys-lru`, ...).
 * - `evicts`: the policy removes keys at the limit (anything but `noeviction`). Completion records, leases and fences
 *   all carry a TTL, so even the `volatile-*` policies evict them: a step whose record is evicted runs again, one
 *   whose fence is evicted runs after its compensation.
 * - `maxmemoryBytes`: the limit, in bytes (0: none); `usedMemoryBytes`: `used_memory`, in bytes, when asked (Redis
 *   compares the limit with what a write would need, so a write may be refused while this is below it: the store
 *   reports that refusal itself, IdempotencyStoreFullError).
 *
 * Source: https://redis.io/docs/latest/develop/reference/eviction/ ; INFO, section `memory`,
 * https://redis.io/docs/latest/commands/info/ .
 */
export interface RedisMemoryPolicy {
  policy: string;
  evicts: boolean;
  maxmemoryBytes: number;
  usedMemoryBytes: number;
}

/** The only policy under which Redis never removes a key it holds to make room. */
export const NO_EVICTION = 'noeviction';

/**
 * The idempotency store's Redis evicts keys at its memory limit: records and fences could vanish and steps run again
 * (or after their compensation). Not retryable: set `maxmemory-policy noeviction` on the server, give the store its own
 * Redis, or accept it explicitly (the workers' WORKER_IDEMPOTENCY_ALLOW_EVICTION).
 */
export class IdempotencyStoreEvictsError extends KeyflowError {
  readonly retryable = retryableOf('IDEMPOTENCY_STORE_EVICTS');
  readonly code = 'IDEMPOTENCY_STORE_EVICTS';
  constructor(readonly policy: string) {
    super(
      (policy.startsWith('unknown')
        ? `the idempotency store's Redis does not say its maxmemory-policy (${policy}): it may evict keys at its ` +
          'memory limit, completion records and fences included, and their steps would run again; let its user run INFO, with '
        : `the idempotency store's Redis has maxmemory-policy ${policy}: at its memory limit it evicts keys, ` +
          'completion records and fences included, and their steps would run again; set ') +
        `maxmemory-policy ${NO_EVICTION} ` +
        '(or allow it explicitly: WORKER_IDEMPOTENCY_ALLOW_EVICTION=true)',
    );
  }
}

const field = (info: string, name: string) =>
  info
    .split(/\r?\n/)
    .find((l) => l.startsWith(`${name}:`))
    ?.slice(name.length + 1)
    .trim();

/** The `policy` reported for a Redis that does not say its own: counted as evicting. */
const unknownPolicy = (why: string) => `unknown (${why})`;

/**
 * Asks a Redis what it does at its memory limit (`INFO memory`: `maxmemory_policy`, `maxmemory`, `used_memory`).
 * A Redis that refuses INFO (an error reply: NOPERM for an ACL user without `@dangerous`, unknown command when it is
 * renamed) or whose answer lacks `maxmemory_policy` is reported as `unknown (<why>)`, `evicts: true`: nothing shows
 * it keeps records and fences.
 * @param redis a connected ioredis client; one round trip
 * @throws IdempotencyStoreUnavailableError (retryable) when Redis does not answer INFO
 */
export async function checkRedisMemoryPolicy(redis: Redis): Promise<RedisMemoryPolicy> {
  let info: string;
  try {
    info = await redis.info('memory');
  } catch (e) {
    // Redis answered, with an error (an ACL user without @dangerous: NOPERM; INFO renamed away: unknown command): it
    // will not say, so it may evict. Only no answer at all is an outage.
    if (e instanceof ReplyError)
      return {
        policy: unknownPolicy(`INFO memory refused: ${(e as Error).message}`),
        evicts: true,
        maxmemoryBytes: 0,
        usedMemoryBytes: 0,
      };
    throw new IdempotencyStoreUnavailableError('INFO memory', e);
  }
  const policy = field(info, 'maxmemory_policy') ?? unknownPolicy('INFO memory has no maxmemory_policy');
  const maxmemoryBytes = Number(field(info, 'maxmemory') ?? 0) || 0;
  const usedMemoryBytes = Number(field(info, 'used_memory') ?? 0) || 0;
  return {
    policy,
    evicts: policy !== NO_EVICTION,
    maxmemoryBytes,
    usedMemoryBytes,
  };
}

/**
 * Refuses an evicting policy unless `allowEviction`.
 * @throws IdempotencyStoreEvictsError (not retryable) naming the policy
 */
export function requireNoEviction(p: RedisMemoryPolicy, allowEviction: boolean): void {
  if (p.evicts && !allowEviction) throw new IdempotencyStoreEvictsError(p.policy);
}
