import type Redis from 'ioredis';
import {
  checkRedisMemoryPolicy,
  checkRedisPersistence,
  requireNoEviction,
  type IdempotencyStoreFullError,
  type RedisPersistence,
} from '@keyflow/idempotency';
import type { ComponentHealth, Logger } from '@keyflow/observability';

/** The degraded condition of a noeviction Redis at its memory limit (code IDEMPOTENCY_STORE_FULL). */
export const IDEMPOTENCY_STORE_FULL_CONDITION = 'idempotency-store-full';

/** What /health says about the idempotency store's Redis (see checkRedisPersistence). */
export type IdempotencyHealth = (
  | (Pick<RedisPersistence, 'durable' | 'reason' | 'snapshotIntervalS'> & { aof: boolean; checkedAt: number })
  | { durable: null; reason: string }
) & { eviction?: EvictionHealth };

/**
 * What /health says about the idempotency store's maxmemory-policy (see checkRedisMemoryPolicy): `allowed` false
 * means the worker failed for good over it (component `idempotency store`).
 */
export interface EvictionHealth {
  policy: string;
  evicts: boolean;
  allowed: boolean;
  /** maxmemory in bytes (0: no limit). */
  maxmemoryBytes: number;
  reason: string;
}

/**
 * The idempotency store's Redis as /health reports it: whether it persists its records, whether it evicts them
 * (checked at each (re)connection, see {@link checkEviction} and {@link checkPersistence}), and whether it is full.
 */
export class IdempotencyStoreHealth {
  private persistence: IdempotencyHealth = { durable: null, reason: 'not checked yet (Redis not ready)' };
  private eviction?: EvictionHealth;

  constructor(
    private readonly health: ComponentHealth,
    private readonly log: Logger,
    /** WORKER_IDEMPOTENCY_ALLOW_EVICTION: an evicting policy is accepted (and warned about). */
    private readonly allowEviction: boolean,
    /** The component an evicting policy fails (WORKER_COMPONENTS.idempotencyStore). */
    private readonly component: string,
  ) {}

  /** Whether the idempotency records' Redis persists them and whether it evicts them (for /health). */
  report(): IdempotencyHealth {
    return this.eviction ? { ...this.persistence, eviction: this.eviction } : this.persistence;
  }

  /**
   * Asks Redis what it does at its memory limit. An evicting policy (anything but noeviction) fails the worker for good
   * (component `idempotency store`, code IDEMPOTENCY_STORE_EVICTS: /health 503, exit 1) unless
   * WORKER_IDEMPOTENCY_ALLOW_EVICTION; resolves with that error, or undefined. A check Redis does not answer is
   * logged and left to the next connection.
   */
  async checkEviction(redis: Redis): Promise<Error | undefined> {
    try {
      const p = await checkRedisMemoryPolicy(redis);
      const allowed = this.allowEviction;
      this.eviction = {
        policy: p.policy,
        evicts: p.evicts,
        allowed: !p.evicts || allowed,
        maxmemoryBytes: p.maxmemoryBytes,
        reason: !p.evicts
          ? 'maxmemory-policy noeviction: records and fences are never evicted; at maxmemory writes are refused (/health degraded, IDEMPOTENCY_STORE_FULL)'
          : `maxmemory-policy ${p.policy} evicts keys at maxmemory: records and fences may vanish and steps run again` +
            (allowed ? ' (accepted: WORKER_IDEMPOTENCY_ALLOW_EVICTION=true)' : ''),
      };
      try {
        requireNoEviction(p, allowed);
      } catch (e) {
        this.health.fail(this.component, e);
        return e as Error;
      }
      if (p.evicts) this.log.warn({ eviction: this.eviction }, this.eviction.reason);
    } catch (err) {
      this.log.warn({ err }, "could not check the idempotency store's maxmemory-policy");
    }
    return undefined;
  }

  /** A noeviction Redis at maxmemory refuses the store's writes: degraded while it lasts, logged once each way. */
  onStoreFull(err: IdempotencyStoreFullError | null): void {
    if (err) {
      this.health.degrade(IDEMPOTENCY_STORE_FULL_CONDITION, { code: err.code, error: err.message });
      this.log.error(
        { code: err.code, err: err.message },
        'idempotency store full: tasks wait until Redis has room',
      );
    } else {
      this.health.recover(IDEMPOTENCY_STORE_FULL_CONDITION);
      this.log.info('idempotency store accepts writes again');
    }
  }

  /**
   * Asks Redis whether it persists (AOF or RDB snapshots) and warns when it persists nothing: a Redis restart would
   * then forget completion records, and redelivered tasks would run again. Never fails the worker.
   */
  async checkPersistence(redis: Redis): Promise<void> {
    try {
      const p = await checkRedisPersistence(redis);
      this.persistence = {
        durable: p.durable,
        reason: p.reason,
        aof: p.aof,
        ...(p.snapshotIntervalS === undefined ? {} : { snapshotIntervalS: p.snapshotIntervalS }),
        checkedAt: Date.now(),
      };
      if (p.durable) this.log.info({ idempotency: p }, 'idempotency store persists its records');
      else
        this.log.warn(
          { idempotency: p },
          `idempotency store (Redis) persists nothing: ${p.reason}. Run it with appendonly yes (infra/local/stack.sh does)`,
        );
    } catch (err) {
      this.persistence = { durable: null, reason: `check failed: ${(err as Error).message}` };
      this.log.warn({ err }, 'could not check whether the idempotency store persists');
    }
  }
}
