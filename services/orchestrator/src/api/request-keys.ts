import { createHash } from 'node:crypto';
import type Redis from 'ioredis';
import stringify from 'safe-stable-stringify';

/**
 * Fingerprint of a request: `sha256:<hex>` of its canonical JSON (keys sorted at every level, undefined members
 * left out; safe-stable-stringify), so the same request with its JSON keys in another order has the same one.
 */
export function fingerprint(request: unknown): string {
  return `sha256:${createHash('sha256')
    .update(stringify(request) ?? 'null')
    .digest('hex')}`;
}

/**
 * KEYS[1] a binding; ARGV[1] the fingerprint it must have; ARGV[2] `set` (then ARGV[3] replaces it, keeping its TTL)
 * or `del`. Does it only when the binding exists, has that fingerprint and no `answer` yet; returns 1 when done.
 */
const IF_UNANSWERED = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local b = cjson.decode(v)
if b.fingerprint ~= ARGV[1] or b.answer ~= nil then return 0 end
if ARGV[2] == 'set' then redis.call('SET', KEYS[1], ARGV[3], 'KEEPTTL') else redis.call('DEL', KEYS[1]) end
return 1
`;

/**
 * What a key is bound to: the fingerprint of its first request and the run that request started (or was about).
 * `answer` is the first request's HTTP answer once it has one (run requests: signal, cancel, terminate, retry),
 * given again to a repeat of the request.
 */
export interface Binding {
  fingerprint: string;
  runId: string;
  answer?: { status: number; body: unknown };
}

/**
 * Keys the API binds once, in Redis, shared by every API instance: Idempotency-Keys (to the first request's
 * fingerprint and run) and webhook delivery ids. One `SET key value NX GET PX ttl` (Redis >= 7.0) both claims a
 * free key and returns the existing binding, atomically, so concurrent requests agree on one winner.
 */
export class RequestKeys {
  constructor(
    private readonly redis: Redis,
    /** Prefix of every Redis key (the deployment's topic prefix keeps test namespaces apart). */
    private readonly prefix: string,
  ) {}

  /**
   * Binds `key` (in `space`) to `binding` for `ttlMs` unless it is bound already.
   * @returns the existing binding, or undefined when this call bound the key.
   * @throws the Redis client's error when Redis does not answer (the caller answers 503).
   */
  async claim(space: string, key: string, binding: Binding, ttlMs: number): Promise<Binding | undefined> {
    const old = (await this.redis.call(
      'SET',
      this.redisKey(space, key),
      JSON.stringify(binding),
      'NX',
      'GET',
      'PX',
      `${ttlMs}`,
    )) as string | null;
    return old === null ? undefined : (JSON.parse(old) as Binding);
  }

  /**
   * Adds the first answer to a key's binding: `binding` (with its `answer`) replaces the stored one only when that
   * one is of the same request (same fingerprint) and has no answer yet, keeping its TTL. So the first answer given
   * stays the key's answer, whichever API instance gave it, and a repeat sent concurrently never replaces it; a key
   * that expired or was freed meanwhile stays free. One Lua script (atomic in Redis).
   * @returns whether this answer was stored.
   * @throws the Redis client's error when Redis does not answer.
   */
  async settle(space: string, key: string, binding: Binding): Promise<boolean> {
    const stored = await this.redis.eval(
      IF_UNANSWERED,
      1,
      this.redisKey(space, key),
      binding.fingerprint,
      'set',
      JSON.stringify(binding),
    );
    return stored === 1;
  }

  /** Frees a key this instance bound when what it guarded did not happen (the StartRun was not written). */
  async release(space: string, key: string): Promise<void> {
    await this.redis.del(this.redisKey(space, key));
  }

  /**
   * Frees a key this call bound to the request of fingerprint `fp` when what it guarded may not have happened (an
   * answer of 500 or more), unless the binding has an answer by then: a repeat of the request, sent concurrently
   * through another instance, was answered, and that answer stays. One Lua script (atomic in Redis).
   * @returns whether the key was freed.
   * @throws the Redis client's error when Redis does not answer.
   */
  async releaseUnanswered(space: string, key: string, fp: string): Promise<boolean> {
    return (await this.redis.eval(IF_UNANSWERED, 1, this.redisKey(space, key), fp, 'del')) === 1;
  }

  private redisKey(space: string, key: string): string {
    return `${this.prefix}keyflow:api:${space}:${key}`;
  }
}
