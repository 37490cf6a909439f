import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** redis-server arguments for an append-only file fsynced every second (what infra/local/stack.sh runs). */
export const REDIS_AOF_ARGS = ['--appendonly', 'yes', '--appendfsync', 'everysec', '--save', ''] as const;
/** redis-server arguments for no persistence at all (neither AOF nor RDB snapshots). */
export const REDIS_NO_PERSISTENCE_ARGS = ['--appendonly', 'no', '--save', ''] as const;

/** A free TCP port on 127.0.0.1 (the OS picks it; free when returned, so take it at once). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/**
 * A redis-server (from PATH) a test owns: its own free port and temporary data dir, so it can be stopped and
 * started again on the same data, with the arguments given (e.g. {@link REDIS_AOF_ARGS}). `remove()` stops it and
 * deletes the dir.
 */
export class OwnRedisServer {
  proc?: ChildProcess;

  private constructor(
    readonly dir: string,
    readonly port: number,
    private readonly args: readonly string[],
  ) {}

  /** Creates the dir, picks a port and starts it. @throws Error when redis-server exits before it is ready. */
  static async start(args: readonly string[]): Promise<OwnRedisServer> {
    const r = new OwnRedisServer(mkdtempSync(join(tmpdir(), 'keyflow-redis-')), await freePort(), args);
    await r.start();
    return r;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts it and resolves once it logs "Ready to accept connections" (its AOF, if any, is loaded by then). */
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

  /** SIGTERM (Redis fsyncs its AOF and exits) and waits for the exit. */
  stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      p.once('exit', () => resolve());
      p.kill('SIGTERM');
    });
  }

  async remove(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
