import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Redis from 'ioredis';
import { TestNamespace } from '@keyflow/testing';
import { checkRedisPersistence, IdempotencyStore } from '../../src';

/** A redis-server (from PATH) this test owns: its own port and data dir, so it can be stopped and started again. */
class OwnRedis {
  proc?: ChildProcess;
  constructor(
    readonly dir: string,
    readonly port: number,
    private readonly args: string[],
  ) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts it and resolves once it logs "Ready to accept connections" (AOF loaded). */
  start(): Promise<void> {
    const p = spawn(
      'redis-server',
      [
        '--bind',
        '127.0.0.1',
        '--port',
        String(this.port),
        '--dir',
        this.dir,
        '--daemonize',
        'no',
        ...this.args,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.proc = p;
    return new Promise((resolve, reject) => {
      let out = '';
      p.stdout!.on('data', (b: Buffer) => {
        out += b.toString();
        if (out.includes('Ready to accept connections')) resolve();
      });
      p.once('exit', (code) =>
        reject(new Error(`redis-server exited (${code}) before it was ready:\n${out}`)),
      );
      p.once('error', reject);
    });
  }

  /** SIGTERM (Redis fsyncs the AOF and exits) and waits for the exit. */
  stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      p.once('exit', () => resolve());
      p.kill('SIGTERM');
    });
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

const AOF = ['--appendonly', 'yes', '--appendfsync', 'everysec', '--save', ''];
const client = (url: string) => new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: false });

describe('idempotency records on a persistent Redis', () => {
  const dirs: string[] = [];
  const servers: OwnRedis[] = [];
  const own = async (args: string[]) => {
    const dir = mkdtempSync(join(tmpdir(), 'keyflow-redis-'));
    dirs.push(dir);
    const r = new OwnRedis(dir, await freePort(), args);
    servers.push(r);
    await r.start();
    return r;
  };
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.stop()));
    dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
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
    const server = await own(['--appendonly', 'no', '--save', '']);
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
    const none = await own(['--appendonly', 'no', '--save', '', '--rename-command', 'CONFIG', '']);
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
    expect(r.durable).toBe(aofOn || save !== '');
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
