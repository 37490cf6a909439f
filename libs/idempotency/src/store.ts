import { randomUUID } from 'node:crypto';
import type Redis from 'ioredis';

/**
 * Idempotency store on Redis. One key per idempotency key, holding either
 *  - a lease `{ s: 'running', t: <token> }` with a TTL (the lease time), while one worker runs the task, or
 *  - a completion record `{ s: 'done', r: <result> }` with a TTL (how long redeliveries are answered from it).
 * Every transition is one Lua script, so two workers never both acquire, and a worker whose lease expired and was
 * taken over cannot overwrite the new holder's state.
 *
 * Durability: a completion record is only as durable as Redis. Run Redis with AOF (appendonly yes) where a lost
 * record must not lead to a re-run; without it, a Redis restart forgets records (at-least-once still holds).
 */

/** Outcome of {@link IdempotencyStore.begin}. */
export type BeginResult<R> =
  | { state: 'acquired'; lease: Lease }
  | { state: 'completed'; result: R }
  | { state: 'running'; expiresInMs: number };

/** A held lease: renew it while the task runs, complete or release it at the end. */
export interface Lease {
  key: string;
  token: string;
}

/** Redis did not answer (down, or the connection is being re-established). Retryable. */
export class IdempotencyStoreUnavailableError extends Error {
  readonly retryable = true;
  readonly code = 'IDEMPOTENCY_STORE_UNAVAILABLE';
  constructor(operation: string, cause: unknown) {
    super(
      `idempotency store (Redis) unavailable during ${operation}: ${(cause as Error)?.message ?? String(cause)}`,
      { cause },
    );
    this.name = 'IdempotencyStoreUnavailableError';
  }
}

const BEGIN = `
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {'acquired', ''}
end
return {'exists', v, tostring(redis.call('PTTL', KEYS[1]))}
`;
// Renew only our own lease.
const RENEW = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`;
// Complete when we still hold the lease, or nobody does (it expired and was not taken over).
const COMPLETE = `
local v = redis.call('GET', KEYS[1])
if (not v) or v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
`;
const RELEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

export interface IdempotencyStoreOptions {
  /** Prefix of every Redis key, e.g. `keyflow:idem:`. */
  keyPrefix: string;
  /** Lease time in ms: how long a crashed holder blocks redeliveries. Renew at a third of it. Default 30 000. */
  leaseMs?: number;
  /** How long a completion record answers redeliveries, in ms. Default 7 days (the task topics' retention). */
  completionTtlMs?: number;
}

export class IdempotencyStore<R = unknown> {
  readonly leaseMs: number;
  readonly completionTtlMs: number;

  constructor(
    private readonly redis: Redis,
    private readonly opts: IdempotencyStoreOptions,
  ) {
    this.leaseMs = opts.leaseMs ?? 30_000;
    this.completionTtlMs = opts.completionTtlMs ?? 7 * 24 * 3600 * 1000;
  }

  private k(key: string): string {
    return `${this.opts.keyPrefix}${key}`;
  }

  private async call<T>(operation: string, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (e) {
      throw new IdempotencyStoreUnavailableError(operation, e);
    }
  }

  /**
   * Takes the lease for `key` unless the task already completed (returns its stored result) or another holder
   * runs it now (returns how long its lease has left, in ms).
   * @throws IdempotencyStoreUnavailableError (retryable) when Redis does not answer.
   */
  async begin(key: string): Promise<BeginResult<R>> {
    const token = randomUUID();
    const lease = JSON.stringify({ s: 'running', t: token });
    const [state, value, pttl] = (await this.call('begin', () =>
      this.redis.eval(BEGIN, 1, this.k(key), lease, this.leaseMs),
    )) as [string, string, string?];
    if (state === 'acquired') return { state: 'acquired', lease: { key, token: lease } };
    const parsed = JSON.parse(value) as { s: string; r?: R };
    if (parsed.s === 'done') return { state: 'completed', result: parsed.r as R };
    return { state: 'running', expiresInMs: Math.max(0, Number(pttl ?? 0)) };
  }

  /** Extends the lease by the lease time. @returns false when the lease was lost (expired and taken over). */
  async renew(lease: Lease): Promise<boolean> {
    return (
      (await this.call('renew', () =>
        this.redis.eval(RENEW, 1, this.k(lease.key), lease.token, this.leaseMs),
      )) === 1
    );
  }

  /**
   * Stores the completion record holding `result`. @returns false when another holder took the lease over
   * (its outcome wins; ours is still valid to publish, and the reader of results deduplicates).
   */
  async complete(lease: Lease, result: R): Promise<boolean> {
    const record = JSON.stringify({ s: 'done', r: result });
    return (
      (await this.call('complete', () =>
        this.redis.eval(COMPLETE, 1, this.k(lease.key), lease.token, record, this.completionTtlMs),
      )) === 1
    );
  }

  /** Gives the lease up without a record (the task will be redelivered and run again). */
  async release(lease: Lease): Promise<void> {
    await this.call('release', () => this.redis.eval(RELEASE, 1, this.k(lease.key), lease.token));
  }
}
