import Redis from 'ioredis';
import { OwnRedisServer, REDIS_AOF_ARGS } from '@keyflow/testing';
import {
  checkRedisMemoryPolicy,
  checkRedisPersistence,
  IdempotencyStore,
  IdempotencyStoreEvictsError,
  IdempotencyStoreFullError,
  requireNoEviction,
} from '../../src';

const client = (url: string) => new Redis(url, { maxRetriesPerRequest: 1 });

/**
 * What the idempotency store needs of its Redis: records and fences that are never evicted (maxmemory-policy
 * noeviction), a full memory reported as such, and persistence reported as it is.
 */
describe('the idempotency store checks what its Redis keeps', () => {
  const servers: OwnRedisServer[] = [];
  const clients: Redis[] = [];
  const own = async (args: readonly string[]) => {
    const r = await OwnRedisServer.start(args);
    servers.push(r);
    const c = client(r.url);
    clients.push(c);
    return c;
  };
  afterAll(async () => {
    for (const c of clients) c.disconnect();
    await Promise.all(servers.map((s) => s.remove()));
  });

  it('an evicting maxmemory-policy (volatile-lru, allkeys-lru) is refused with the reason, unless allowed; noeviction passes', async () => {
    for (const policy of ['volatile-lru', 'allkeys-lru', 'volatile-ttl']) {
      const redis = await own([...REDIS_AOF_ARGS, '--maxmemory', '64mb', '--maxmemory-policy', policy]);
      const p = await checkRedisMemoryPolicy(redis);
      expect(p).toMatchObject({ policy, evicts: true });
      let refused: unknown;
      try {
        requireNoEviction(p, false);
      } catch (e) {
        refused = e;
      }
      expect(refused).toBeInstanceOf(IdempotencyStoreEvictsError);
      expect(refused).toMatchObject({ code: 'IDEMPOTENCY_STORE_EVICTS', retryable: false });
      expect((refused as Error).message).toContain(policy);
      expect((refused as Error).message).toMatch(/noeviction/);
      expect(() => requireNoEviction(p, true)).not.toThrow();
    }
    const safe = await checkRedisMemoryPolicy(
      await own([...REDIS_AOF_ARGS, '--maxmemory-policy', 'noeviction']),
    );
    expect(safe).toMatchObject({ policy: 'noeviction', evicts: false });
    expect(() => requireNoEviction(safe, false)).not.toThrow();
  });

  it('a Redis that refuses to say its policy (INFO denied to the ACL user, or renamed away) is refused like an evicting one, unless allowed', async () => {
    const admin = await own([...REDIS_AOF_ARGS, '--maxmemory', '64mb', '--maxmemory-policy', 'allkeys-lru']);
    // A common managed-service ACL: every command but the @dangerous ones (INFO, CONFIG, ...).
    await admin.call('ACL', 'SETUSER', 'worker', 'on', '>pw', '~*', '&*', '+@all', '-@dangerous');
    const { port } = admin.options;
    const worker = client(`redis://worker:pw@127.0.0.1:${port}`);
    clients.push(worker);
    await expect(worker.info('memory')).rejects.toThrow(/NOPERM/);
    const p = await checkRedisMemoryPolicy(worker);
    expect(p).toMatchObject({ evicts: true });
    let refused: unknown;
    try {
      requireNoEviction(p, false);
    } catch (e) {
      refused = e;
    }
    expect(refused).toMatchObject({ code: 'IDEMPOTENCY_STORE_EVICTS', retryable: false });
    expect((refused as Error).message).toMatch(/NOPERM/);
    expect(() => requireNoEviction(p, true)).not.toThrow();

    const renamed = await own([
      ...REDIS_AOF_ARGS,
      '--maxmemory-policy',
      'allkeys-lru',
      '--rename-command',
      'INFO',
      '',
    ]);
    expect(await checkRedisMemoryPolicy(renamed)).toMatchObject({ evicts: true });
  });

  it('noeviction at its memory limit: a write fails with IDEMPOTENCY_STORE_FULL (not an outage), reported once, cleared when memory frees', async () => {
    const redis = await own([...REDIS_AOF_ARGS, '--maxmemory', '4mb', '--maxmemory-policy', 'noeviction']);
    const changes: Array<string | null> = [];
    const store = new IdempotencyStore<{ out: number }>(redis, {
      keyPrefix: 'full:',
      leaseMs: 5_000,
      onFullChange: (e) => changes.push(e ? e.code : null),
    });
    // Fill up to maxmemory with small writes, until Redis refuses one: the store's writes are then refused too.
    const chunk = 'x'.repeat(8 * 1024);
    let fillers = 0;
    const fillUntilRefused = async () => {
      for (; fillers < 10_000; fillers++) {
        const refused = await redis.set(`filler-${fillers}`, chunk).then(
          () => false,
          (e: Error) => /OOM/.test(e.message),
        );
        if (refused) return;
      }
    };
    await fillUntilRefused();
    // Used memory can fall back just under maxmemory after the refused write (its buffers freed) before the store
    // writes: then fill again. The store's first refused write is what the assertions below are about.
    let refusal: unknown;
    for (let probe = 0; refusal === undefined && probe < 20; probe++) {
      refusal = await store.begin(`probe-${probe}`).then(
        () => undefined,
        (e: unknown) => e,
      );
      if (refusal === undefined) await fillUntilRefused();
    }
    expect(fillers).toBeLessThan(10_000);
    expect(refusal).toBeInstanceOf(IdempotencyStoreFullError);
    await expect(store.begin('a')).rejects.toBeInstanceOf(IdempotencyStoreFullError);
    await expect(store.begin('b')).rejects.toMatchObject({ code: 'IDEMPOTENCY_STORE_FULL', retryable: true });
    expect(changes).toEqual(['IDEMPOTENCY_STORE_FULL']);
    for (let i = 0; i < fillers; i += 500)
      await redis.del(...Array.from({ length: Math.min(500, fillers - i) }, (_, j) => `filler-${i + j}`));
    await expect(store.begin('a')).resolves.toMatchObject({ state: 'acquired' });
    expect(changes).toEqual(['IDEMPOTENCY_STORE_FULL', null]);
  });

  it('RDB snapshots alone are not durable: the writes since the last snapshot are lost, and the report says how long that may be', async () => {
    const redis = await own(['--appendonly', 'no', '--save', '900 1 60 100']);
    const p = await checkRedisPersistence(redis);
    expect(p).toMatchObject({ aof: false, durable: false, rdbSave: '900 1 60 100', snapshotIntervalS: 900 });
    expect(p.reason).toMatch(/since the last snapshot/);
    expect(p.reason).toContain('900 s');
  });
});
