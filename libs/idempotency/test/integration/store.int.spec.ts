import { OwnRedisServer, REDIS_NO_PERSISTENCE_ARGS, TestNamespace } from '@keyflow/testing';
import {
  BATCH_MAX_KEYS,
  ForeignRecordError,
  IdempotencyStore,
  IdempotencyStoreUnavailableError,
} from '../../src';
import Redis from 'ioredis';

describe('the Redis idempotency store', () => {
  const ns = new TestNamespace('idem');
  afterAll(() => ns.cleanup());
  const store = (leaseMs = 5_000) =>
    new IdempotencyStore<{ out: number }>(ns.redis(), { keyPrefix: ns.redisPrefix('idem:'), leaseMs });

  it('gives the lease to one of many concurrent callers; the others see it running', async () => {
    const s = store();
    const results = await Promise.all(Array.from({ length: 20 }, () => s.begin('task-a')));
    expect(results.filter((r) => r.state === 'acquired')).toHaveLength(1);
    const others = results.filter((r) => r.state === 'running');
    expect(others).toHaveLength(19);
    expect(others.every((r) => r.state === 'running' && r.expiresInMs > 0 && r.expiresInMs <= 5_000)).toBe(
      true,
    );
  });

  it('a completed task answers later begins with its stored result', async () => {
    const s = store();
    const first = await s.begin('task-b');
    if (first.state !== 'acquired') throw new Error('expected the lease');
    await expect(s.complete(first.lease, { out: 42 })).resolves.toBe(true);
    await expect(s.begin('task-b')).resolves.toEqual({ state: 'completed', result: { out: 42 } });
  });

  it('a holder whose lease expired and was taken over can neither renew nor overwrite', async () => {
    const s = store(100);
    const first = await s.begin('task-c');
    if (first.state !== 'acquired') throw new Error('expected the lease');
    let second = await s.begin('task-c');
    while (second.state === 'running') {
      await new Promise((r) => setTimeout(r, second.state === 'running' ? second.expiresInMs + 5 : 0));
      second = await s.begin('task-c');
    }
    if (second.state !== 'acquired') throw new Error('expected the lease after expiry');
    await expect(s.renew(first.lease)).resolves.toBe(false);
    await expect(s.complete(first.lease, { out: 1 })).resolves.toBe(false);
    await expect(s.complete(second.lease, { out: 2 })).resolves.toBe(true);
    await expect(s.begin('task-c')).resolves.toEqual({ state: 'completed', result: { out: 2 } });
  });

  it('a released lease lets the task run again', async () => {
    const s = store();
    const first = await s.begin('task-d');
    if (first.state !== 'acquired') throw new Error('expected the lease');
    await s.release(first.lease);
    await expect(s.begin('task-d')).resolves.toMatchObject({ state: 'acquired' });
  });

  it('a holder whose lease expired with nobody taking it over renews and records it (an outage alone never forces a re-run)', async () => {
    const s = store(100);
    const first = await s.begin('task-e');
    if (first.state !== 'acquired') throw new Error('expected the lease');
    const redis = ns.redis();
    const key = ns.redisPrefix('idem:') + 'task-e';
    while ((await redis.exists(key)) === 1) await new Promise((r) => setTimeout(r, 20));
    await expect(s.renew(first.lease)).resolves.toBe(true);
    await expect(s.begin('task-e')).resolves.toMatchObject({ state: 'running' });
    await expect(s.complete(first.lease, { out: 1 })).resolves.toBe(true);
    await expect(s.begin('task-e')).resolves.toEqual({ state: 'completed', result: { out: 1 } });
  });

  it('a holder whose lease was taken over can neither renew nor write over a fence', async () => {
    const s = store();
    const first = await s.begin('task-e2');
    if (first.state !== 'acquired') throw new Error('expected the lease');
    const redis = ns.redis();
    await redis.set(ns.redisPrefix('idem:') + 'task-e2', JSON.stringify({ s: 'fenced', by: 'x' }));
    await expect(s.renew(first.lease)).resolves.toBe(false);
    await expect(s.complete(first.lease, { out: 1 })).resolves.toBe(false);
    await expect(s.begin('task-e2')).resolves.toEqual({ state: 'fenced', by: 'x' });
  });

  it('a failed record answers its own and earlier attempts; a later attempt of the step runs again', async () => {
    const s = store();
    const first = await s.begin('task-f', 2);
    if (first.state !== 'acquired') throw new Error('expected the lease');
    await s.complete(first.lease, { out: -1 }, false);
    await expect(s.begin('task-f', 1)).resolves.toEqual({ state: 'completed', result: { out: -1 } });
    await expect(s.begin('task-f', 2)).resolves.toEqual({ state: 'completed', result: { out: -1 } });
    const third = await s.begin('task-f', 3);
    expect(third).toMatchObject({ state: 'acquired', lease: { attempt: 3 } });
  });

  it('a completed record answers every attempt of the step, earlier and later', async () => {
    const s = store();
    const first = await s.begin('task-g', 1);
    if (first.state !== 'acquired') throw new Error('expected the lease');
    await s.complete(first.lease, { out: 7 });
    await expect(s.begin('task-g', 3)).resolves.toEqual({ state: 'completed', result: { out: 7 } });
  });

  it('a fence stops every later command of the undone step; it waits for a holder and keeps a completion', async () => {
    const s = store();
    await expect(s.fence('step-h', 'step-h.compensate')).resolves.toEqual({ state: 'fenced' });
    await expect(s.begin('step-h', 1)).resolves.toEqual({ state: 'fenced', by: 'step-h.compensate' });
    await expect(s.begin('step-h', 5)).resolves.toEqual({ state: 'fenced', by: 'step-h.compensate' });

    const running = await s.begin('step-i', 1);
    if (running.state !== 'acquired') throw new Error('expected the lease');
    await expect(s.fence('step-i', 'c')).resolves.toMatchObject({ state: 'running' });
    await s.complete(running.lease, { out: 1 });
    await expect(s.fence('step-i', 'c')).resolves.toEqual({ state: 'completed' });
    await expect(s.begin('step-i', 2)).resolves.toEqual({ state: 'completed', result: { out: 1 } });

    const failed = await s.begin('step-j', 1);
    if (failed.state !== 'acquired') throw new Error('expected the lease');
    await s.complete(failed.lease, { out: 0 }, false);
    await expect(s.fence('step-j', 'c')).resolves.toEqual({ state: 'fenced' });
    await expect(s.begin('step-j', 2)).resolves.toMatchObject({ state: 'fenced' });
  });

  it('a key of another Redis type fails only its own begin, as a foreign record (not retryable), never its neighbours', async () => {
    const s = store();
    const redis = ns.redis();
    await redis.hset(ns.redisPrefix('idem:step-wrongtype'), 'f', 'v');
    const keys = ['step-n1', 'step-wrongtype', 'step-n2'];
    const begun = await Promise.allSettled(keys.map((k) => s.begin(k)));
    expect(begun.map((b) => (b.status === 'fulfilled' ? b.value.state : b.reason.constructor.name))).toEqual([
      'acquired',
      'ForeignRecordError',
      'acquired',
    ]);
    const err = (begun[1] as PromiseRejectedResult).reason as ForeignRecordError;
    expect(err.retryable).toBe(false);
    expect(err.redisKey).toBe(ns.redisPrefix('idem:step-wrongtype'));
  });

  it('every operation on a key of another Redis type answers for that key (foreign or lost), never "Redis unavailable"', async () => {
    const s = store();
    const redis = ns.redis();
    const wrong = ns.redisPrefix('idem:step-wrongtype-2');
    await redis.hset(wrong, 'f', 'v');
    // A compensation of that step: a foreign record (to the DLQ), not a retryable outage that holds the partition.
    const fenced = await s.fence('step-wrongtype-2', 'comp').catch((e: unknown) => e);
    expect(fenced).toBeInstanceOf(ForeignRecordError);
    await expect(s.peek('step-wrongtype-2')).rejects.toBeInstanceOf(ForeignRecordError);
    // A lease on a key that has since become another type is lost: renew and complete say so, and write nothing.
    const begun = await s.begin('step-turned');
    if (begun.state !== 'acquired') throw new Error('expected the lease');
    await redis.del(ns.redisPrefix('idem:step-turned'));
    await redis.hset(ns.redisPrefix('idem:step-turned'), 'f', 'v');
    await expect(s.renew(begun.lease)).resolves.toBe(false);
    await expect(s.complete(begun.lease, { out: 1 })).resolves.toBe(false);
    expect(await redis.type(ns.redisPrefix('idem:step-turned'))).toBe('hash');
  });

  it('says Redis is unavailable, as a retryable error, when it does not answer', async () => {
    const dead = new Redis('redis://127.0.0.1:1', {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    const s = new IdempotencyStore(dead, { keyPrefix: 'x:' });
    const err = await s.begin('k').catch((e) => e);
    expect(err).toBeInstanceOf(IdempotencyStoreUnavailableError);
    expect(err.retryable).toBe(true);
    // The many-keys forms answer each key with the error instead of rejecting (what other calls did stands).
    const many = await s.beginMany(
      Array.from({ length: BATCH_MAX_KEYS + 1 }, (_, i) => ({ key: `k${i}`, attempt: 1 })),
    );
    expect(many).toHaveLength(BATCH_MAX_KEYS + 1);
    expect(many.every((b) => b instanceof IdempotencyStoreUnavailableError)).toBe(true);
    const lease = { key: 'k', token: 't', attempt: 1 };
    const completed = await s.completeMany([{ lease, result: null, ok: true }]);
    expect(completed[0]).toBeInstanceOf(IdempotencyStoreUnavailableError);
    dead.disconnect();
  });

  it('beginMany and completeMany answer each key in its place as begin and complete would, in one script call per BATCH_MAX_KEYS keys', async () => {
    const server = await OwnRedisServer.start(REDIS_NO_PERSISTENCE_ARGS);
    const redis = new Redis(server.url, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
    try {
      await new Promise((r) => redis.once('ready', r));
      const s = new IdempotencyStore<{ out: number }>(redis, { keyPrefix: 'many:', leaseMs: 5_000 });
      const done = await s.begin('done');
      if (done.state !== 'acquired') throw new Error('expected the lease');
      await s.complete(done.lease, { out: 7 });
      await s.begin('running');
      await s.fence('fenced', 'comp');
      await redis.hset('many:foreign', 'f', 'v');
      const calls = async () =>
        Number(/cmdstat_evalsha:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0) +
        Number(/cmdstat_eval:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0);
      const fresh = Array.from({ length: BATCH_MAX_KEYS + 10 }, (_, i) => `fresh-${i}`);
      const keys = ['done', 'running', 'fenced', 'foreign', ...fresh];
      const before = await calls();
      const begun = await s.beginMany(keys.map((key) => ({ key, attempt: 1 })));
      expect(await calls()).toBe(before + 2);
      expect(begun.slice(0, 4)).toEqual([
        { state: 'completed', result: { out: 7 } },
        { state: 'running', expiresInMs: expect.any(Number) },
        { state: 'fenced', by: 'comp' },
        expect.any(ForeignRecordError),
      ]);
      const leases = begun.slice(4).map((b) => {
        if (b instanceof Error || b.state !== 'acquired')
          throw new Error(`expected a lease, got ${String(b)}`);
        return b.lease;
      });
      // One lease is lost before its record is written: another holder took the key over.
      await redis.set('many:fresh-3', JSON.stringify({ s: 'running', t: 'other', a: 1 }), 'PX', 5_000);
      const written = await s.completeMany(
        leases.map((lease, i) => ({ lease, result: { out: i }, ok: true })),
      );
      expect(written.filter((w) => !w)).toHaveLength(1);
      expect(written[3]).toBe(false);
      expect(await calls()).toBe(before + 4);
      await expect(s.begin('fresh-4')).resolves.toEqual({ state: 'completed', result: { out: 4 } });
      await expect(s.begin('fresh-3')).resolves.toMatchObject({ state: 'running' });
    } finally {
      redis.disconnect();
      await server.remove();
    }
  });

  it('the begins and completes of one event-loop turn share one script call each (up to BATCH_MAX_KEYS keys)', async () => {
    const server = await OwnRedisServer.start(REDIS_NO_PERSISTENCE_ARGS);
    // The worker's client settings (kafka-task.transport.ts): auto-pipelining on, no offline queue.
    const redis = new Redis(server.url, {
      maxRetriesPerRequest: 1,
      enableAutoPipelining: true,
      enableOfflineQueue: false,
    });
    try {
      await new Promise((r) => redis.once('ready', r));
      const s = new IdempotencyStore<{ out: number }>(redis, { keyPrefix: 'turn:', leaseMs: 5_000 });
      // Counted: EVALSHA and EVAL (ioredis sends a script's first call on a connection as EVAL).
      const calls = async () => {
        const stats = await redis.info('commandstats');
        return ['evalsha', 'eval'].reduce(
          (n, c) => n + Number(new RegExp(`cmdstat_${c}:calls=(\\d+)`).exec(stats)?.[1] ?? 0),
          0,
        );
      };
      const before = await calls();
      const keys = Array.from({ length: BATCH_MAX_KEYS + 100 }, (_, i) => `step-${i}`);
      const begun = await Promise.all(keys.map((k) => s.begin(k)));
      const afterBegins = await calls();
      const done = await Promise.all(
        begun.map((b, i) => (b.state === 'acquired' ? s.complete(b.lease, { out: i }) : false)),
      );
      const afterCompletes = await calls();
      expect(begun.every((b) => b.state === 'acquired')).toBe(true);
      expect(done.every(Boolean)).toBe(true);
      expect(afterBegins - before).toBe(2);
      expect(afterCompletes - afterBegins).toBe(2);
      await expect(s.begin(`step-${BATCH_MAX_KEYS + 99}`)).resolves.toEqual({
        state: 'completed',
        result: { out: BATCH_MAX_KEYS + 99 },
      });
    } finally {
      redis.disconnect();
      await server.remove();
    }
  });
});
