import type Redis from 'ioredis';
import { ReplyError } from 'ioredis';
import { IdempotencyStoreUnavailableError } from './store';

/**
 * What a Redis keeps across a restart, as {@link checkRedisPersistence} found it.
 *
 * - `aof`: the append-only file is on (`INFO persistence` → `aof_enabled:1`): every write is logged and replayed at
 *   startup; with `appendfsync everysec` at most about one second of writes is lost on a crash.
 * - `rdbSave`: the RDB snapshot schedule (`CONFIG GET save`, e.g. `3600 1 300 100`), `''` when snapshots are off,
 *   `undefined` when the server refuses CONFIG (managed Redis services often rename or forbid it).
 * - `durable`: completion records survive a restart: AOF on. `false` otherwise: with RDB snapshots only, a crash or
 *   restart loses the writes since the last snapshot (records of tasks that then run again); with neither, or when
 *   the snapshot schedule cannot be read, everything.
 * - `snapshotIntervalS`: with RDB snapshots, the longest interval of the schedule in seconds (`save 900 1 60 100`:
 *   900): how long a single write may wait for the snapshot that keeps it, so how much may be lost. Undefined without
 *   snapshots.
 * - `reason`: one sentence saying why, for logs and the workers' /health.
 */
export interface RedisPersistence {
  aof: boolean;
  rdbSave: string | undefined;
  durable: boolean;
  snapshotIntervalS?: number;
  reason: string;
}

/** The longest interval (seconds) of a `save` schedule (`<seconds> <changes>` pairs), undefined when there is none. */
export function longestSnapshotIntervalS(save: string): number | undefined {
  const n = save
    .trim()
    .split(/\s+/)
    .filter((_, i) => i % 2 === 0)
    .map(Number)
    .filter((v) => Number.isFinite(v) && v > 0);
  return n.length ? Math.max(...n) : undefined;
}

/** The `INFO persistence` field that says whether AOF is on. */
const AOF_ENABLED_FIELD = 'aof_enabled';

/**
 * Asks a Redis whether it persists what is written to it: `INFO persistence` (field `aof_enabled`) and, when the
 * server allows CONFIG, `CONFIG GET save` (the RDB snapshot schedule). A refused CONFIG (an error reply: renamed,
 * disabled or forbidden by an ACL, as on managed Redis) is not an error here: `rdbSave` is then `undefined` and the
 * verdict rests on AOF alone.
 *
 * Sources: Redis persistence, https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/ ;
 * INFO, https://redis.io/docs/latest/commands/info/ (section `persistence`, field `aof_enabled`) ;
 * CONFIG GET, https://redis.io/docs/latest/commands/config-get/ (parameter `save`).
 *
 * @param redis a connected (or connecting) ioredis client; two round trips
 * @throws IdempotencyStoreUnavailableError (retryable) when Redis does not answer INFO
 */
export async function checkRedisPersistence(redis: Redis): Promise<RedisPersistence> {
  let info: string;
  try {
    info = await redis.info('persistence');
  } catch (e) {
    throw new IdempotencyStoreUnavailableError('INFO persistence', e);
  }
  const aofLine = info.split(/\r?\n/).find((l) => l.startsWith(`${AOF_ENABLED_FIELD}:`));
  const aof = aofLine?.slice(AOF_ENABLED_FIELD.length + 1).trim() === '1';

  let rdbSave: string | undefined;
  let configRefused: string | undefined;
  try {
    const reply = (await redis.config('GET', 'save')) as string[];
    rdbSave = reply.length >= 2 ? reply[1] : undefined;
    if (rdbSave === undefined) configRefused = 'CONFIG GET save returned nothing';
  } catch (e) {
    // An error reply (the server answered): CONFIG is not allowed here. A connection error is something else.
    if (!(e instanceof ReplyError)) throw new IdempotencyStoreUnavailableError('CONFIG GET save', e);
    configRefused = `CONFIG refused: ${(e as Error).message}`;
  }
  const rdb = rdbSave !== undefined && rdbSave.trim() !== '';

  if (aof)
    return {
      aof,
      rdbSave,
      durable: true,
      reason: 'AOF is on (aof_enabled:1): completion records survive a restart',
    };
  if (rdb) {
    const snapshotIntervalS = longestSnapshotIntervalS(rdbSave ?? '');
    return {
      aof,
      rdbSave,
      durable: false,
      snapshotIntervalS,
      reason:
        `AOF is off; RDB snapshots only (save "${rdbSave}"): a crash or restart loses the writes since the last ` +
        `snapshot, up to ${snapshotIntervalS ?? '?'} s of them, and the tasks of forgotten completion records would ` +
        'run again (run Redis with appendonly yes)',
    };
  }
  return {
    aof,
    rdbSave,
    durable: false,
    reason:
      rdbSave === undefined
        ? `AOF is off and the RDB snapshot schedule is unknown (${configRefused}): a restart may forget completion records, and their tasks would run again`
        : 'AOF is off and RDB snapshots are off (save ""): a restart forgets every completion record, and their tasks would run again',
  };
}
