import Redis from 'ioredis';
import {
  freePort,
  OwnRedisServer,
  REDIS_AOF_ARGS,
  REDIS_NO_PERSISTENCE_ARGS,
  TestNamespace,
} from '@keyflow/testing';
import { checkRedisPersistence, IdempotencyStore } from '../../src';

const AOF = REDIS_AOF_ARGS;
const client = (url: string) => new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: false });

describe('idempotency records on a persistent Redis', () => {
  const servers: OwnRedisServer[] = [];
  const own = async (args: readonly string[]) => {
    const r = await OwnRedisServer.start(args);
    servers.push(r);
    return r;
  };
  afterAll(() => Promise.all(servers.map((s) => s.remove())));

  it('keeps working when the server has forgotten its scripts (SCRIPT FLUSH, as after a restart), pipelined too', async () => {
    const server = await own(REDIS_NO_PERSISTENCE_ARGS);
    const redis = new Redis(server.url, { maxRetriesPerRequest: 1, enableAutoPipelining: true });
    try {
      const store = new IdempotencyStore<{ out: number }>(redis, { keyPrefix: 'flush:', leaseMs: 5_000 });
      await expect(store.begin('before')).resolves.toMatchObject({ state: 'acquired' });
      await redis.script('FLUSH');
      // Concurrent calls share one pipeline: each script is sent as EVALSHA, refused (NOSCRIPT), and sent again.
      const begun = await Promise.all(['a', 'b', 'c'].map((k) => store.begin(k)));
      expect(begun.map((b) => b.state)).toEqual(['acquired', 'acquired', 'acquired']);
      const done = await Promise.all(
        begun.map((b, i) => (b.state === 'acquired' ? store.complete(b.lease, { out: i }) : false)),
      );
      expect(done).toEqual([true, true, true]);
      await expect(store.begin('b')).resolves.toEqual({ state: 'completed', result: { out: 1 } });
    } finally {
      redis.disconnect();
    }
  });

  it('a completion record survives a Redis restart on AOF: begin answers completed with the stored result', async () => {
    const server = await own(AOF);
    let redis = client(server.url);
    const opts = { keyPrefix: 'durable:', leaseMs: 5_000 };
    let store = new IdempotencyStore<{ out: number }>(redis, opts);
    const first = await store.begin('run-1/step-a');
    if (first.state !== 'acquired') throw new Error('expected the lease');
    await expect(store.complete(first.lease, { out: 42 })).resolves.toBe(true);
    redis.disconnect();

    await server.stop();
    expect(server.proc!.exitCode ?? server.proc!.signalCode).not.toBeNull();
    await server.start(); // same dir, same port: replays the AOF
    redis = client(server.url);
    store = new IdempotencyStore<{ out: number }>(redis, opts);
    await expect(store.begin('run-1/step-a')).resolves.toEqual({ state: 'completed', result: { out: 42 } });
    // and a key never completed is free, so the restart did not invent records either
    await expect(store.begin('run-1/step-b')).resolves.toMatchObject({ state: 'acquired' });
    redis.disconnect();
  });

  it('without persistence the same restart forgets the record (what the AOF test guards against)', async () => {
    const server = await own(REDIS_NO_PERSISTENCE_ARGS);
    let redis = client(server.url);
    const store = new IdempotencyStore<{ out: number }>(redis, { keyPrefix: 'volatile:' });
    const first = await store.begin('k');
    if (first.state !== 'acquired') throw new Error('expected the lease');
    await store.complete(first.lease, { out: 1 });
    redis.disconnect();
    await server.stop();
    await server.start();
    redis = client(server.url);
    await expect(new IdempotencyStore(redis, { keyPrefix: 'volatile:' }).begin('k')).resolves.toMatchObject({
      state: 'acquired',
    });
    redis.disconnect();
  });

  it('the persistence check says an AOF Redis is durable', async () => {
    const server = await own(AOF);
    const redis = client(server.url);
    await expect(checkRedisPersistence(redis)).resolves.toMatchObject({
      aof: true,
      rdbSave: '',
      durable: true,
    });
    redis.disconnect();
  });

  it('the persistence check works where CONFIG is refused (as on managed Redis), from INFO alone', async () => {
    const aof = await own([...AOF, '--rename-command', 'CONFIG', '']);
    const none = await own([...REDIS_NO_PERSISTENCE_ARGS, '--rename-command', 'CONFIG', '']);
    const a = client(aof.url);
    const n = client(none.url);
    await expect(checkRedisPersistence(a)).resolves.toMatchObject({
      aof: true,
      rdbSave: undefined,
      durable: true,
    });
    const r = await checkRedisPersistence(n);
    expect(r).toMatchObject({ aof: false, rdbSave: undefined, durable: false });
    expect(r.reason).toMatch(/CONFIG refused/);
    a.disconnect();
    n.disconnect();
  });

  it("the persistence check agrees with the run's own Redis (REDIS_URL) about its AOF and snapshots", async () => {
    // stack.sh's AOF Redis (durable), or a Redis given in REDIS_URL such as a machine's 6379 without persistence.
    const ns = new TestNamespace('persist');
    const redis = ns.redis();
    const aofOn = (await redis.info('persistence')).includes('aof_enabled:1');
    const save = ((await redis.config('GET', 'save')) as string[])[1];
    const r = await checkRedisPersistence(redis);
    expect(r.aof).toBe(aofOn);
    // RDB snapshots alone lose the writes since the last snapshot: only AOF is durable.
    expect(r.durable).toBe(aofOn);
    expect(r.snapshotIntervalS !== undefined).toBe(!aofOn && save !== '');
    await ns.cleanup();
  });

  it('the persistence check throws a retryable error when Redis does not answer', async () => {
    const dead = new Redis(`redis://127.0.0.1:${await freePort()}`, {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    await expect(checkRedisPersistence(dead)).rejects.toMatchObject({
      code: 'IDEMPOTENCY_STORE_UNAVAILABLE',
      retryable: true,
    });
    dead.disconnect();
  });
});
