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
   * Replaces the binding of a key this instance bound (adding the first request's answer), keeping its TTL; a key
   * that expired meanwhile stays free. One `SET key value XX KEEPTTL` (Redis >= 6.0).
   * @throws the Redis client's error when Redis does not answer.
   */
  async settle(space: string, key: string, binding: Binding): Promise<void> {
    await this.redis.call('SET', this.redisKey(space, key), JSON.stringify(binding), 'XX', 'KEEPTTL');
  }

  /** Frees a key this instance bound when what it guarded did not happen (the StartRun was not written). */
  async release(space: string, key: string): Promise<void> {
    await this.redis.del(this.redisKey(space, key));
  }

  private redisKey(space: string, key: string): string {
    return `${this.prefix}keyflow:api:${space}:${key}`;
  }
}
