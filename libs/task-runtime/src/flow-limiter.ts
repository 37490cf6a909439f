import { randomUUID } from 'node:crypto';
import type Redis from 'ioredis';
import { abortableSleep } from '@keyflow/kafka';
import { flowKeys } from '@keyflow/ops';
import type { Counter, Gauge, Logger } from '@keyflow/observability';

/**
 * Flow control of one task type, shared by every worker that points at the same limit store (Redis) and key prefix.
 * Each bound counts handler calls (attempts), not commands: a retry is admitted again. Unset or 0: no such bound.
 */
export interface FlowLimit {
  /** Handler calls of this type running at once across all workers (a count). */
  concurrency?: number;
  /** Handler calls running at once per key (a count); the key is the input field `keyField`, else the run id. */
  perKey?: number;
  /** Dotted path of the input field that names the per-key limit's key (e.g. `customerId`); default: the run id. */
  keyField?: string;
  /**
   * Handler calls started per second across all workers, spaced evenly: at least 1000/ratePerSec ms apart, no burst
   * (so at most ratePerSec in any 1 s window).
   */
  ratePerSec?: number;
}

/** Limits by task type (`WORKER_FLOW_LIMITS`, JSON: `{"charge":{"concurrency":5,"perKey":1,"keyField":"customerId","ratePerSec":50}}`). */
export type FlowLimits = Record<string, FlowLimit>;

/** A handler call's admission: give it back with {@link FlowLimiter.release} once the handler settles. */
export interface FlowPermit {
  readonly id: string;
  readonly type: string;
  readonly key: string;
}

export interface FlowLimiterOptions {
  /** The limit store: a Redis connection without offline queue (a call fails at once while it is unreachable). */
  redis: Redis;
  limits: FlowLimits;
  /** The deployment's topic prefix: it keeps deployments' limit keys apart (see flowKeys of @keyflow/ops). */
  topicPrefix: string;
  /**
   * How long a permit outlives its holder's last refresh, in ms (refreshed every third of it): a crashed worker's
   * permits come back after at most this long.
   */
  leaseMs: number;
  logger: Logger;
  /** keyflow_worker_flow_waiting, keyflow_worker_flow_admitted_total and keyflow_worker_flow_store_errors_total (by task_type). */
  metrics: { waiting: Gauge<'task_type'>; admitted: Counter<'task_type'>; storeErrors: Counter<'task_type'> };
}

/** Why an admission was refused by the store (the script's answer). */
const REFUSED_BY = { 1: 'concurrency', 2: 'key', 3: 'rate', 4: 'not in line' } as const;

/** Longest pause between two tries of a waiting head while another worker holds the permits, in ms. */
const POLL_MS = 25;
/**
 * How long a waiter stays in the cluster-wide line without a sign of life from its worker, in ms (its worker renews
 * it at least every WAITER_RENEW_MS): a crashed worker's waiters stop holding others back after this long.
 */
const WAITER_TTL_MS = 5_000;
/** How often a worker renews its waiters' place in the cluster-wide line, in ms. */
const WAITER_RENEW_MS = 1_000;
/** Longest pause between tries while the limit store does not answer, in ms. */
const STORE_RETRY_MAX_MS = 1_000;

/**
 * The cluster-wide line of waiters of a type: KEYS queue (ticket order), alive (expiry), keys (waiter -> its key),
 * seq (tickets). ARGV: waiter ms to live, then pairs of waiter id and key. A waiter not in line is given the next
 * ticket; one in line keeps its place and lives on. Dead waiters (their worker gone) are dropped.
 */
const ENQUEUE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV, 2 do
  if not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[4]), ARGV[i])
    redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  end
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[i])
end
for _, k in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[4]}) do redis.call('PEXPIRE', k, ttl * 4 + 60000) end
return 1
`;

/** Leaves the line (a cancelled wait). KEYS queue, alive, keys. ARGV: waiter ids. */
const DEQUEUE = `
for i = 1, #ARGV do
  redis.call('ZREM', KEYS[1], ARGV[i]); redis.call('ZREM', KEYS[2], ARGV[i]); redis.call('HDEL', KEYS[3], ARGV[i])
end
return 1
`;

/**
 * One atomic admission of the waiter ARGV[1] (in line, see ENQUEUE): dead waiters and expired permits dropped; then
 * the type's concurrency, the waiter's key's, the waiters ahead of it in line that could go first (each key counted
 * up to its free per-key permits), and the rate (a GCRA without burst: the next start time `tat` is at least an
 * interval after the last, and only the first waiter that can go takes it); all pass or nothing is taken. Time is
 * Redis's (TIME), so workers' clocks do not matter.
 * KEYS: held, key prefix of held-by-key sets, tat, queue, alive, keys. ARGV: waiter id, its key, concurrency,
 * perKey, interval ms, lease ms. Returns {1} or {0, why (1 concurrency or waiters ahead, 2 key, 3 rate), wait ms}.
 */
const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id, key = ARGV[1], ARGV[2]
local conc, perKey, interval, lease = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
for _, dead in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)) do
  redis.call('ZREM', KEYS[4], dead); redis.call('ZREM', KEYS[5], dead); redis.call('HDEL', KEYS[6], dead)
end
local rank = redis.call('ZRANK', KEYS[4], id)
if not rank then return {0, 4, 0} end
local free = 1000000000
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  free = conc - redis.call('ZCARD', KEYS[1])
  if free <= 0 then return {0, 1, 0} end
end
local function keyFree(k)
  if perKey == 0 then return 1000000000 end
  return perKey - redis.call('ZCOUNT', KEYS[2] .. k, now + 1, '+inf')
end
if keyFree(key) <= 0 then return {0, 2, 0} end
local ahead = 0
if rank > 0 then
  local used = {}
  for _, w in ipairs(redis.call('ZRANGE', KEYS[4], 0, rank - 1)) do
    local k = redis.call('HGET', KEYS[6], w)
    if k then
      used[k] = (used[k] or 0) + 1
      if used[k] <= keyFree(k) then ahead = ahead + 1 end
    end
  end
end
if ahead >= free then return {0, 1, 0} end
if interval > 0 then
  local tat = tonumber(redis.call('GET', KEYS[3]) or '0')
  if tat > now then return {0, 3, tat - now} end
  if ahead > 0 then return {0, 1, 0} end
  redis.call('SET', KEYS[3], now + interval, 'PX', interval + 60000)
end
redis.call('ZREM', KEYS[4], id); redis.call('ZREM', KEYS[5], id); redis.call('HDEL', KEYS[6], id)
if conc > 0 then
  redis.call('ZADD', KEYS[1], now + lease, id)
  redis.call('PEXPIRE', KEYS[1], lease * 2)
end
if perKey > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2] .. key, '-inf', now)
  redis.call('ZADD', KEYS[2] .. key, now + lease, id)
  redis.call('PEXPIRE', KEYS[2] .. key, lease * 2)
end
return {1, 0, 0}
`;

/** Pushes a held permit's expiry on (re-adding it if it expired). KEYS: held, held by key. ARGV: id, lease ms. Returns 1 when it had expired. */
const REFRESH = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
local lost = 0
for i = 1, #KEYS do
  if redis.call('ZADD', KEYS[i], now + lease, ARGV[1]) == 1 then lost = 1 end
  redis.call('PEXPIRE', KEYS[i], lease * 2)
end
return lost
`;

/** A task waiting for its admission, in its type's line. */
interface Waiter {
  /** Its id in the cluster-wide line, and its permit's id once admitted. */
  id: string;
  key: string;
  resolve: (p: FlowPermit) => void;
  reject: (e: unknown) => void;
  /** Called once, when a pass over the line left it waiting (see {@link FlowLimiter.admit}). */
  onWait?: () => void;
  /** Whether `onWait` was called. */
  waited?: boolean;
}

/** One task type's line of waiters in this process and whether its pump runs. */
interface Line {
  limit: Required<Omit<FlowLimit, 'keyField'>> & { keyField?: string };
  waiters: Waiter[];
  pumping: boolean;
  /** When the waiters' places in the cluster-wide line were last renewed (ms since epoch; 0: some are not in it). */
  enqueuedAt: number;
  /** Wakes the pump's pause early (a permit of this type was given back here). */
  wake?: () => void;
}

type FlowRedis = Redis & {
  flowAcquire(...a: Array<string | number>): Promise<[number, number, number]>;
  flowEnqueue(...a: Array<string | number>): Promise<number>;
  flowDequeue(...a: Array<string | number>): Promise<number>;
  flowRefresh(...a: Array<string | number>): Promise<number>;
};

/**
 * Cluster-wide flow control by task type (concurrency, per-key concurrency, smooth rate) on Redis, with a lease
 * per permit (refreshed while the handler runs, so a crashed worker's permits come back after `leaseMs`).
 *
 * Waiting: a task waits in its type's line, one line per type across all workers (in the store: a ticket per waiter
 * in arrival order, renewed every second while its worker lives). A waiter is admitted only when the waiters ahead of
 * it that could go now (a waiter whose key is at its per-key bound cannot) leave it a free permit, and only the first
 * of them takes the next rate slot; so a key at its bound does not hold back other keys, and one type's line never
 * holds back another type. In each process its waiters ask in their order, the head first. Nothing times out or fails
 * while waiting: the wait ends with a permit, or when the caller cancels it (shutdown, revocation, lost lease).
 *
 * The store unreachable: admissions stop (each try fails, the head tries again with backoff up to 1 s, logged),
 * handlers already admitted run on (their permits are refreshed once it answers again; one that expired meanwhile
 * is re-added and logged). Nothing is failed or run twice by the limiter: the task keeps its idempotency lease
 * while it waits.
 */
export class FlowLimiter {
  private readonly lines = new Map<string, Line>();
  private readonly held = new Map<string, FlowPermit>();
  private readonly redis: FlowRedis;
  private readonly refreshTimer: NodeJS.Timeout;
  private readonly closed = new AbortController();
  private readonly keys: ReturnType<typeof flowKeys>;

  /** @throws Error when a limit is negative or not a number */
  constructor(private readonly o: FlowLimiterOptions) {
    for (const [type, l] of Object.entries(o.limits)) {
      const limit = {
        concurrency: count(type, 'concurrency', l.concurrency),
        perKey: count(type, 'perKey', l.perKey),
        ratePerSec: count(type, 'ratePerSec', l.ratePerSec),
        keyField: l.keyField,
      };
      if (limit.concurrency || limit.perKey || limit.ratePerSec)
        this.lines.set(type, { limit, waiters: [], pumping: false, enqueuedAt: 0 });
    }
    this.keys = flowKeys(o.topicPrefix);
    this.redis = o.redis as FlowRedis;
    // The limits, for the ops console (GET /ops/overview), at each (re)connection.
    const announce = () =>
      void Promise.all(
        [...this.lines].map(([type, l]) => this.redis.hset(this.keys.limits, type, JSON.stringify(l.limit))),
      ).catch(() => undefined);
    this.redis.on('ready', announce);
    if (this.redis.status === 'ready') announce();
    this.redis.defineCommand('flowAcquire', { numberOfKeys: 6, lua: ACQUIRE });
    this.redis.defineCommand('flowEnqueue', { numberOfKeys: 4, lua: ENQUEUE });
    this.redis.defineCommand('flowDequeue', { numberOfKeys: 3, lua: DEQUEUE });
    this.redis.defineCommand('flowRefresh', { lua: REFRESH });
    this.refreshTimer = setInterval(() => void this.refresh(), Math.max(100, o.leaseMs / 3));
    this.refreshTimer.unref();
  }

  /** Whether `type` has a limit (tasks of other types are never held). */
  limits(type: string): boolean {
    return this.lines.has(type);
  }

  /** The per-key limit's key of a task: its input's `keyField`, else the run id. */
  keyOf(type: string, input: unknown, runId: string): string {
    const field = this.lines.get(type)?.limit.keyField;
    if (!field) return runId;
    let v: unknown = input;
    for (const part of field.split('.'))
      v = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[part] : undefined;
    return v === undefined || v === null ? runId : String(v);
  }

  /**
   * Waits for the admission of one handler call of `type` (a type without a limit is admitted at once).
   * @param cancel aborting it ends the wait: the promise rejects with its reason and nothing is held.
   * @param onWait called once (synchronously, from the line's pump) when the call is not admitted by the first pass
   *   over its line that reaches it (the limit, the waiters ahead of it or an unreachable store hold it back): it
   *   waits from then on. Never called for a call admitted at once.
   * @returns the permit to give back with {@link release}; never rejects for the limit or the store.
   */
  admit(type: string, key: string, cancel?: AbortSignal, onWait?: () => void): Promise<FlowPermit> {
    const line = this.lines.get(type);
    if (!line) return Promise.resolve({ id: '', type, key });
    return new Promise<FlowPermit>((resolve, reject) => {
      const w: Waiter = { id: randomUUID(), key, resolve, reject, onWait };
      if (cancel?.aborted) return reject(cancel.reason);
      const onCancel = () => {
        const i = line.waiters.indexOf(w);
        if (i >= 0) line.waiters.splice(i, 1);
        // Leaves the cluster-wide line (else it goes after WAITER_TTL_MS).
        this.redis.flowDequeue(...this.lineKeys(type), w.id).catch(() => undefined);
        this.o.metrics.waiting.set({ task_type: type }, line.waiters.length);
        reject(cancel!.reason);
      };
      cancel?.addEventListener('abort', onCancel, { once: true });
      w.resolve = (p) => {
        cancel?.removeEventListener('abort', onCancel);
        resolve(p);
      };
      line.waiters.push(w);
      line.enqueuedAt = 0;
      this.o.metrics.waiting.set({ task_type: type }, line.waiters.length);
      if (!line.pumping) void this.pump(type, line);
      else line.wake?.();
    });
  }

  /** Gives a permit back (once the handler settled). A store error is ignored: the permit expires after leaseMs. */
  release(p: FlowPermit): void {
    if (!p.id || !this.held.delete(p.id)) return;
    this.redis.zrem(this.heldKey(p.type), p.id).catch(() => undefined);
    this.redis.zrem(this.keyKey(p.type, p.key), p.id).catch(() => undefined);
    this.lines.get(p.type)?.wake?.();
  }

  /** Tasks waiting in this process, by type (for the console and tests). */
  waiting(): Record<string, number> {
    return Object.fromEntries([...this.lines].map(([t, l]) => [t, l.waiters.length]));
  }

  /** Stops refreshing and asking; waiters are left to their callers' cancel signals. */
  close(): void {
    clearInterval(this.refreshTimer);
    this.closed.abort();
  }

  /** Admits the line's waiters in order while the store admits them; pauses as the store says, then goes on. */
  private async pump(type: string, line: Line): Promise<void> {
    line.pumping = true;
    let failures = 0;
    try {
      while (line.waiters.length > 0 && !this.closed.signal.aborted) {
        let pause: number;
        const before = new Set(line.waiters);
        try {
          pause = await this.tryLine(type, line);
          failures = 0;
        } catch (err) {
          failures++;
          this.o.metrics.storeErrors.inc({ task_type: type });
          pause = Math.min(STORE_RETRY_MAX_MS, 50 * 2 ** Math.min(failures, 5));
          if (failures === 1 || failures % 20 === 0)
            this.o.logger.warn(
              { err: (err as Error).message, taskType: type, waiting: line.waiters.length },
              'flow limit store unreachable: tasks keep waiting',
            );
        }
        this.markWaiting(line, before);
        if (pause > 0) await this.pause(line, pause);
      }
    } finally {
      line.pumping = false;
    }
  }

  /** Tells each waiter of `before` (in line when a pass began) still in line after it, once, that it waits. */
  private markWaiting(line: Line, before: Set<Waiter>): void {
    for (const w of line.waiters) {
      if (w.waited || !before.has(w)) continue;
      w.waited = true;
      try {
        w.onWait?.();
      } catch (err) {
        this.o.logger.warn({ err: (err as Error).message }, 'flow wait listener threw');
      }
    }
  }

  /**
   * One pass over the line: its waiters' places in the cluster-wide line renewed (each second, or at once when one is
   * new), then the first waiter of each key asks, in order; stops at a concurrency or rate refusal. Returns how long
   * to pause before the next pass (0: go on at once).
   */
  private async tryLine(type: string, line: Line): Promise<number> {
    if (Date.now() - line.enqueuedAt >= WAITER_RENEW_MS) {
      const at = Date.now();
      await this.redis.flowEnqueue(
        ...this.lineKeys(type, true),
        WAITER_TTL_MS,
        ...line.waiters.flatMap((w) => [w.id, w.key]),
      );
      line.enqueuedAt = at;
    }
    const refusedKeys = new Set<string>();
    for (let i = 0; i < line.waiters.length;) {
      const w = line.waiters[i];
      if (refusedKeys.has(w.key)) {
        i++;
        continue;
      }
      const [ok, why, waitMs] = await this.ask(type, line, w);
      if (ok === 1) {
        const at = line.waiters.indexOf(w);
        if (at < 0) {
          // Cancelled while asking: the permit goes back.
          this.release(this.hold({ id: w.id, type, key: w.key }));
          continue;
        }
        line.waiters.splice(at, 1);
        this.o.metrics.waiting.set({ task_type: type }, line.waiters.length);
        this.o.metrics.admitted.inc({ task_type: type });
        w.resolve(this.hold({ id: w.id, type, key: w.key }));
        continue;
      }
      const refused = REFUSED_BY[why as 1 | 2 | 3 | 4];
      if (refused === 'not in line') {
        line.enqueuedAt = 0; // dropped from the line (the store lost it, or it was away too long): enqueued again
        return 0;
      }
      if (refused !== 'key') return refused === 'rate' ? Math.max(1, waitMs) : POLL_MS;
      refusedKeys.add(w.key);
      i++;
    }
    return line.waiters.length > 0 ? POLL_MS : 0;
  }

  /** One admission try of `w` (see ACQUIRE). */
  private ask(type: string, line: Line, w: Waiter): Promise<[number, number, number]> {
    const [queue, alive, keys] = this.lineKeys(type);
    return this.redis.flowAcquire(
      this.heldKey(type),
      this.keyKey(type, ''),
      this.tatKey(type),
      queue,
      alive,
      keys,
      w.id,
      w.key,
      line.limit.concurrency,
      line.limit.perKey,
      line.limit.ratePerSec ? 1000 / line.limit.ratePerSec : 0,
      this.o.leaseMs,
    );
  }

  /** The keys of a type's cluster-wide line: queue, alive, keys (and, with `seq`, the ticket counter). */
  private lineKeys(type: string, seq = false): string[] {
    const k = this.keys;
    return [k.queue(type), k.alive(type), k.waiterKeys(type), ...(seq ? [k.seq(type)] : [])];
  }

  private hold(p: FlowPermit): FlowPermit {
    this.held.set(p.id, p);
    return p;
  }

  /** Sleeps `ms`, or less when a permit of the line's type is given back here. */
  private pause(line: Line, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = new AbortController();
      line.wake = () => wake.abort();
      void abortableSleep(ms, wake.signal)
        .catch(() => undefined)
        .then(() => {
          line.wake = undefined;
          resolve();
        });
    });
  }

  /** Pushes every held permit's expiry on; a permit that had expired is re-added (and logged). */
  private async refresh(): Promise<void> {
    await Promise.all(
      [...this.held.values()].map(async (p) => {
        const l = this.lines.get(p.type)!.limit;
        const keys = [l.concurrency ? this.heldKey(p.type) : '', l.perKey ? this.keyKey(p.type, p.key) : ''];
        const used = keys.filter(Boolean);
        if (used.length === 0) return;
        // A release sent meanwhile goes on the same connection after this call, so it is never undone by it.
        const lost = await this.redis.flowRefresh(used.length, ...used, p.id, this.o.leaseMs).catch(() => 0);
        if (lost === 1 && this.held.has(p.id))
          this.o.logger.warn(
            { taskType: p.type, key: p.key },
            'flow permit had expired while its handler ran (limit store away longer than WORKER_FLOW_LEASE_MS): re-added',
          );
      }),
    );
  }

  private heldKey(type: string): string {
    return this.keys.held(type);
  }
  private keyKey(type: string, key: string): string {
    return this.keys.keyPrefix(type) + key;
  }
  private tatKey(type: string): string {
    return this.keys.tat(type);
  }
}

/** A limit as a whole count >= 0. @throws Error otherwise */
function count(type: string, name: string, v: number | undefined): number {
  if (v === undefined) return 0;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0)
    throw new Error(`flow limit ${type}.${name} must be a number >= 0, got ${JSON.stringify(v)}`);
  return name === 'ratePerSec' ? v : Math.floor(v);
}
