import { randomUUID } from 'node:crypto';
import DataLoader from 'dataloader';
import type Redis from 'ioredis';
import { type ErrorCode, KeyflowError, retryableOf } from '@keyflow/errors';

/**
 * Idempotency store on Redis. One key per idempotency key (one per logical step: every attempt of a step shares it),
 * holding one of
 *  - a lease `{ s: 'running', t: <token>, a: <attempt> }` with a TTL (the lease time), while one worker runs the task;
 *  - a completion record `{ s: 'done', ok, a: <attempt>, r: <result> }` with a TTL (how long redeliveries, redrives
 *    and later attempts are answered from it);
 *  - a fence `{ s: 'fenced', by: <compensation key> }`: the step was compensated before it ran, so it never runs.
 * Every transition is one Lua script, so two workers never both acquire, and a worker whose lease was taken over
 * cannot write a record (the completion write is fenced by the lease token; an empty key, where the lease expired
 * in a Redis outage and nobody took it, is taken back, so an outage alone never makes a finished task run again).
 *
 * Which attempt runs: a completed record answers every attempt (the step's one effect); a failed record answers
 * its own and earlier attempts, while a later attempt (the orchestrator retrying the step) takes the lease again.
 *
 * Durability: a record is only as durable as Redis. Run Redis with AOF (appendonly yes) where a lost record must
 * not lead to a re-run; without it, a Redis restart forgets records (at-least-once still holds).
 */

/** Outcome of {@link IdempotencyStore.begin}. */
export type BeginResult<R> =
  | { state: 'acquired'; lease: Lease }
  | { state: 'completed'; result: R }
  | { state: 'running'; expiresInMs: number }
  | { state: 'fenced'; by: string };

/** Outcome of {@link IdempotencyStore.fence}. */
export type FenceResult =
  { state: 'fenced' } | { state: 'completed' } | { state: 'running'; expiresInMs: number };

/** A held lease: renew it while the task runs, complete or release it at the end. */
export interface Lease {
  key: string;
  token: string;
  attempt: number;
}

/** Redis did not answer (down, or the connection is being re-established). Retryable. */
export class IdempotencyStoreUnavailableError extends KeyflowError {
  readonly retryable = true;
  readonly code: ErrorCode = 'IDEMPOTENCY_STORE_UNAVAILABLE';
  constructor(operation: string, cause: unknown) {
    super(
      `idempotency store (Redis) unavailable during ${operation}: ${(cause as Error)?.message ?? String(cause)}`,
      { cause },
    );
  }
}

/**
 * Redis refused a write because it is at its `maxmemory` with `maxmemory-policy noeviction` (its `OOM command not
 * allowed` error reply). Retryable (it answers again once memory is freed or maxmemory raised), but not an outage:
 * the store reports it through {@link IdempotencyStoreOptions.onFullChange} (the workers' /health shows it as
 * degraded) instead of leaving callers to retry without a word. A subclass of IdempotencyStoreUnavailableError, so
 * callers that hold their work while Redis is away hold it here too.
 * Source: https://redis.io/docs/latest/develop/reference/eviction/ (noeviction: "New values aren't saved when memory
 * limit is reached").
 */
export class IdempotencyStoreFullError extends IdempotencyStoreUnavailableError {
  override readonly code = 'IDEMPOTENCY_STORE_FULL';
  constructor(operation: string, cause: unknown) {
    super(operation, cause);
    this.message =
      `idempotency store (Redis) is full during ${operation}: it reached maxmemory with maxmemory-policy ` +
      `noeviction and refuses writes (${(cause as Error)?.message ?? String(cause)}); free memory or raise maxmemory`;
  }
}

/** Whether `e` is Redis's refusal of a write at maxmemory (`OOM command not allowed ...`, also from a script). */
const isOutOfMemory = (e: unknown) => /\bOOM command not allowed\b/.test((e as Error)?.message ?? '');

/**
 * The key holds a value this store did not write (not a JSON object): something else uses the key prefix. Not
 * retryable: the key must be cleaned up or the prefix changed (`keyPrefix`).
 */
export class ForeignRecordError extends KeyflowError {
  readonly retryable = retryableOf('IDEMPOTENCY_FOREIGN_RECORD');
  readonly code = 'IDEMPOTENCY_FOREIGN_RECORD';
  constructor(readonly redisKey: string) {
    super(
      `idempotency key ${redisKey} holds a value this store did not write; clean it up or change keyPrefix`,
    );
  }
}

function parseRecord<R>(redisKey: string, value: string): { s: string; r?: R; by?: string } {
  try {
    const v: unknown = JSON.parse(value);
    if (v && typeof v === 'object' && typeof (v as { s?: unknown }).s === 'string') return v as { s: string };
  } catch {
    /* not JSON: foreign */
  }
  throw new ForeignRecordError(redisKey);
}

/** What `value_of` answers for a key of another Redis type (a Lua string literal). */
const WRONGTYPE = `'WRONGTYPE'`;
// Lua shared by the scripts: the key's string value, false when absent, or WRONGTYPE when the key holds another Redis
// type (a value this store did not write: answered for that key alone; Redis's error reply starts with that code). Any
// other error (an ACL refusal) fails the call, as a retryable outage.
const GET_VALUE = `
local function value_of(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and v.err then
    if string.find(v.err, 'WRONGTYPE', 1, true) then return ${WRONGTYPE} end
    return redis.error_reply(v.err)
  end
  return v
end
`;

// Many keys in one call (see BATCH_MAX_KEYS). KEYS: the keys; ARGV[1] lease ms, then for key i ARGV[2i] its lease JSON
// and ARGV[2i+1] its attempt. A failed record of an earlier attempt gives way to a later one. A key this store cannot
// read (another Redis type) answers 'foreign' for itself alone: one bad key never fails the keys sharing its call.
const BEGIN = `${GET_VALUE}
local out = {}
for i, key in ipairs(KEYS) do
  local v = value_of(key)
  if type(v) == 'table' then return v end
  if v == ${WRONGTYPE} then
    out[i] = {'foreign', ''}
  else
    local held = false
    -- Only a failed record gives way, and only it is decoded (records hold whole outputs: decoding every one would
    -- make a redelivery storm's script long).
    if v and not string.find(v, '"ok":false', 1, true) then
      held = true
    elseif v then
      local ok, rec = pcall(cjson.decode, v)
      held = not (ok and type(rec) == 'table' and rec.s == 'done' and rec.ok == false
        and (tonumber(rec.a) or 0) < tonumber(ARGV[2 * i + 1]))
    end
    if held then
      out[i] = {'exists', v, tostring(redis.call('PTTL', key))}
    else
      redis.call('SET', key, ARGV[2 * i], 'PX', ARGV[1])
      out[i] = {'acquired', ''}
    end
  end
end
return out
`;
// Renew our own lease; take it back if the key is gone (expired during a Redis outage, or Redis restarted without
// it): nobody else holds the step then. Another holder or a record means the lease is lost.
const RENEW = `${GET_VALUE}
local v = value_of(KEYS[1])
if type(v) == 'table' then return v end
if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`;
// A fenced write: while we hold the lease, or nobody holds the key; never over another holder's lease or record.
// Many keys in one call: KEYS the keys; ARGV[1] record ttl ms, then for key i ARGV[2i] its lease token and
// ARGV[2i+1] its record. Answers 1 (written) or 0 (not ours) per key; a key of another Redis type is not ours.
const COMPLETE = `${GET_VALUE}
local out = {}
for i, key in ipairs(KEYS) do
  local v = value_of(key)
  if type(v) == 'table' then return v end
  if v == ${WRONGTYPE} then
    out[i] = 0
  elseif v == ARGV[2 * i] or not v then
    redis.call('SET', key, ARGV[2 * i + 1], 'PX', ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`;
const RELEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;
// KEYS[1] the undone step's key; ARGV: fence JSON, ttl ms. Waits for a running holder, keeps a completion.
const FENCE = `${GET_VALUE}
local v = value_of(KEYS[1])
if type(v) == 'table' then return v end
if v == ${WRONGTYPE} then return {'foreign', ''} end
if v then
  local ok, rec = pcall(cjson.decode, v)
  if not (ok and type(rec) == 'table') then return {'foreign', ''} end
  if rec.s == 'running' then return {'running', tostring(redis.call('PTTL', KEYS[1]))} end
  if rec.s == 'fenced' then return {'fenced', ''} end
  if not (rec.s == 'done' and rec.ok == false) then return {'completed', ''} end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {'fenced', ''}
`;

/** The Redis key prefix of the workers' idempotency records for a deployment's topic prefix (one definition). */
export const idempotencyKeyPrefix = (topicPrefix: string) => `${topicPrefix}keyflow:idem:`;

/**
 * What a key's record says without taking anything (`peek`): `completed` / `failed` (a result is stored: a command of
 * that attempt re-publishes it), `fenced` (its compensation ran: it never runs), `running` (a lease), `absent` (no
 * record, or it expired: a command would run the handler).
 */
export type RecordState = 'completed' | 'failed' | 'fenced' | 'running' | 'absent';

/**
 * Default of how long completion records and fences answer redeliveries, in ms: 7 days, the task topics' retention
 * (schemas/catalog.yaml). The workers' WORKER_COMPLETION_TTL_MS; the CLI reads the same variable to know which DLQ
 * records are older than the fences (libs/workflow rerunVerdict).
 */
export const DEFAULT_COMPLETION_TTL_MS = 7 * 24 * 3600 * 1000;

export interface IdempotencyStoreOptions {
  /** Prefix of every Redis key, e.g. `keyflow:idem:`. */
  keyPrefix: string;
  /** Lease time in ms: how long a crashed holder blocks redeliveries. Renew at a third of it. Default 30 000. */
  leaseMs?: number;
  /** How long a completion record answers redeliveries, in ms. Default 7 days (the task topics' retention). */
  completionTtlMs?: number;
  /**
   * Called when Redis starts refusing writes for want of memory (with the IdempotencyStoreFullError), and with null
   * when a later call succeeds again: once per change, so a health report can show the condition while it lasts.
   */
  onFullChange?: (err: IdempotencyStoreFullError | null) => void;
}

/**
 * The scripts, as ioredis commands (`defineCommand`): sent as EVALSHA, with ioredis falling back to EVAL when the
 * server's script cache lacks one (after a restart or SCRIPT FLUSH). One key each, but for begin and complete, which
 * take many (their callers pass the number of keys first, as EVALSHA's numkeys).
 */
const SCRIPTS = {
  keyflowIdemBeginMany: BEGIN,
  keyflowIdemRenew: RENEW,
  keyflowIdemCompleteMany: COMPLETE,
  keyflowIdemRelease: RELEASE,
  keyflowIdemFence: FENCE,
} as const;
type ScriptCommands = {
  [K in keyof typeof SCRIPTS]: (...args: Array<string | number>) => Promise<unknown>;
};
/** The scripts that take many keys. */
const MANY_KEYS = ['keyflowIdemBeginMany', 'keyflowIdemCompleteMany'] as const;

/**
 * Most keys one begin or complete script call carries. Calls made in the same turn of the event loop (the tasks of a
 * fetched batch) share one script call each, up to this many keys: a script blocks Redis while it runs, so a call
 * stays short: a GET and a SET per key, and JSON decoding only of failed records (a complete call carries up to this
 * many whole records, each holding its task's output up to the claim-check threshold: a larger one is stored as a blob
 * and its record holds the reference, see the workers' StoredOutcome). Keys of one call may hash
 * to different slots: the store runs on one Redis primary, not on Redis Cluster.
 */
export const BATCH_MAX_KEYS = 512;

interface BeginRequest {
  key: string;
  lease: string;
  attempt: number;
}
/** [state, stored value, PTTL ms]: state 'acquired', 'exists' or 'foreign'. */
type BeginReply = [string, string, string?];
interface CompleteRequest {
  key: string;
  token: string;
  record: string;
}

/** A begin request for `key`: a fresh lease value (a random token) for `attempt`. */
const beginRequest = (key: string, attempt: number): BeginRequest => ({
  key,
  lease: JSON.stringify({ s: 'running', t: randomUUID(), a: attempt }),
  attempt,
});
/** A complete request: the record a completion writes, fenced by the lease's token. */
const completeRequest = <R>(lease: Lease, result: R, ok: boolean): CompleteRequest => ({
  key: lease.key,
  token: lease.token,
  record: JSON.stringify({ s: 'done', ok, a: lease.attempt, r: result }),
});
/** A request's two ARGV entries in the many-keys scripts. */
const beginArgs = (r: BeginRequest): [string, number] => [r.lease, r.attempt];
const completeArgs = (r: CompleteRequest): [string, string] => [r.token, r.record];

export class IdempotencyStore<R = unknown> {
  readonly leaseMs: number;
  readonly completionTtlMs: number;
  private readonly scripts: ScriptCommands;
  private readonly begins: DataLoader<BeginRequest, BeginReply>;
  private readonly completes: DataLoader<CompleteRequest, number>;

  constructor(
    private readonly redis: Redis,
    private readonly opts: IdempotencyStoreOptions,
  ) {
    this.leaseMs = opts.leaseMs ?? 30_000;
    this.completionTtlMs = opts.completionTtlMs ?? DEFAULT_COMPLETION_TTL_MS;
    for (const [name, lua] of Object.entries(SCRIPTS))
      if (typeof (redis as unknown as Record<string, unknown>)[name] !== 'function')
        redis.defineCommand(
          name,
          (MANY_KEYS as readonly string[]).includes(name) ? { lua } : { numberOfKeys: 1, lua },
        );
    this.scripts = redis as unknown as ScriptCommands;
    this.begins = this.manyKeys('keyflowIdemBeginMany', this.leaseMs, beginArgs);
    this.completes = this.manyKeys('keyflowIdemCompleteMany', this.completionTtlMs, completeArgs);
  }

  /**
   * One call of a many-keys script per event-loop turn for the requests made in it (DataLoader's batching, without its
   * cache: every request goes to Redis), in the scripts' layout: KEYS the requests' keys, ARGV[1] `first`, then each
   * request's two arguments. A failed call fails each of its requests with the same error.
   */
  private manyKeys<Q extends { key: string }, A>(
    script: (typeof MANY_KEYS)[number],
    first: number,
    args: (request: Q) => [string, string | number],
  ): DataLoader<Q, A> {
    return new DataLoader<Q, A>((rs) => this.runMany<Q, A>(script, first, rs, args), {
      cache: false,
      maxBatchSize: BATCH_MAX_KEYS,
    });
  }

  /** One call of a many-keys script for `rs` (at most BATCH_MAX_KEYS), in the layout {@link manyKeys} describes. */
  private async runMany<Q extends { key: string }, A>(
    script: (typeof MANY_KEYS)[number],
    first: number,
    rs: readonly Q[],
    args: (request: Q) => [string, string | number],
  ): Promise<A[]> {
    return (await this.scripts[script](
      rs.length,
      ...rs.map((r) => this.k(r.key)),
      first,
      ...rs.flatMap(args),
    )) as A[];
  }

  /**
   * `rs` in script calls of at most BATCH_MAX_KEYS keys each, one after another; the replies in `rs`'s order. A call
   * Redis did not answer gives each of its requests the error, and the next calls are still made: what the calls
   * before it did stands, and their callers act on it.
   */
  private async runChunked<Q extends { key: string }, A>(
    operation: string,
    script: (typeof MANY_KEYS)[number],
    first: number,
    rs: readonly Q[],
    args: (request: Q) => [string, string | number],
  ): Promise<Array<A | IdempotencyStoreUnavailableError>> {
    const replies: Array<A | IdempotencyStoreUnavailableError> = [];
    for (let i = 0; i < rs.length; i += BATCH_MAX_KEYS) {
      const chunk = rs.slice(i, i + BATCH_MAX_KEYS);
      try {
        replies.push(...(await this.call(operation, () => this.runMany<Q, A>(script, first, chunk, args))));
      } catch (e) {
        if (!(e instanceof IdempotencyStoreUnavailableError)) throw e;
        for (let j = 0; j < chunk.length; j++) replies.push(e);
      }
    }
    return replies;
  }

  private k(key: string): string {
    return `${this.opts.keyPrefix}${key}`;
  }

  /** Whether the last call met Redis's OOM refusal (see {@link IdempotencyStoreOptions.onFullChange}). */
  private full = false;

  private async call<T>(operation: string, f: () => Promise<T>): Promise<T> {
    let out: T;
    try {
      out = await f();
    } catch (e) {
      if (!isOutOfMemory(e)) throw new IdempotencyStoreUnavailableError(operation, e);
      const err = new IdempotencyStoreFullError(operation, e);
      if (!this.full) {
        this.full = true;
        this.opts.onFullChange?.(err);
      }
      throw err;
    }
    if (this.full) {
      this.full = false;
      this.opts.onFullChange?.(null);
    }
    return out;
  }

  /**
   * Reads the record of `key` without changing it (for dry runs: what a redelivered command of `attempt` would do).
   * @throws IdempotencyStoreUnavailableError (retryable) when Redis does not answer.
   * @throws ForeignRecordError (not retryable) when the key holds a value this store did not write (also a key of
   * another Redis type).
   */
  async peek(key: string, attempt = 1): Promise<RecordState> {
    const value = await this.call('peek', () => this.redis.get(this.k(key))).catch((e: unknown) => {
      if (/WRONGTYPE/.test(String((e as Error).cause))) throw new ForeignRecordError(this.k(key));
      throw e;
    });
    if (value === null) return 'absent';
    const rec = parseRecord<R>(this.k(key), value) as { s: string; ok?: boolean; a?: number };
    // As the BEGIN script decides: a failure of an earlier attempt gives way to a later one (it runs).
    if (rec.s === 'done' && rec.ok === false && Number(rec.a ?? 0) < attempt) return 'absent';
    if (rec.s === 'done') return rec.ok === false ? 'failed' : 'completed';
    return rec.s === 'fenced' ? 'fenced' : 'running';
  }

  /**
   * Takes the lease for `key` for attempt `attempt` (1-based, the orchestrator's attempt of the step) unless the
   * step already completed (returns its stored result), failed in this or a later attempt (returns that stored
   * result), was fenced by its compensation, or another holder runs it now (returns how long its lease has left,
   * in ms). Begins made in the same event-loop turn share one script call (at most BATCH_MAX_KEYS keys each).
   * @throws IdempotencyStoreUnavailableError (retryable) when Redis does not answer.
   * @throws ForeignRecordError (not retryable) when the key holds a value this store did not write (also a key of
   * another Redis type).
   */
  async begin(key: string, attempt = 1): Promise<BeginResult<R>> {
    const request = beginRequest(key, attempt);
    return this.beginResult(request, await this.call('begin', () => this.begins.load(request)));
  }

  /**
   * {@link begin} for many keys at once (the tasks of a fetched batch): one script call per BATCH_MAX_KEYS keys,
   * without a promise per key. Each answer is in its request's place; where begin would throw, its error is the
   * answer: ForeignRecordError, or IdempotencyStoreUnavailableError (retryable) for the keys of a call Redis did not
   * answer (leases such a call took before the connection failed are held until they expire, leaseMs, as with
   * begin). Never rejects for one key's sake.
   */
  async beginMany(
    requests: ReadonlyArray<{ key: string; attempt: number }>,
  ): Promise<Array<BeginResult<R> | ForeignRecordError | IdempotencyStoreUnavailableError>> {
    const rs = requests.map((r) => beginRequest(r.key, r.attempt));
    const replies = await this.runChunked<BeginRequest, BeginReply>(
      'begin',
      'keyflowIdemBeginMany',
      this.leaseMs,
      rs,
      beginArgs,
    );
    return rs.map((r, i) => {
      const reply = replies[i];
      if (reply instanceof IdempotencyStoreUnavailableError) return reply;
      try {
        return this.beginResult(r, reply);
      } catch (e) {
        if (e instanceof ForeignRecordError) return e;
        throw e;
      }
    });
  }

  /** What a BEGIN script reply means for `r` (see {@link begin}). @throws ForeignRecordError */
  private beginResult(r: BeginRequest, [state, value, pttl]: BeginReply): BeginResult<R> {
    const { key, lease, attempt } = r;
    if (state === 'acquired') return { state: 'acquired', lease: { key, token: lease, attempt } };
    if (state === 'foreign') throw new ForeignRecordError(this.k(key));
    const parsed = parseRecord<R>(this.k(key), value);
    if (parsed.s === 'done') return { state: 'completed', result: parsed.r as R };
    if (parsed.s === 'fenced') return { state: 'fenced', by: parsed.by ?? '' };
    return { state: 'running', expiresInMs: Math.max(0, Number(pttl ?? 0)) };
  }

  /**
   * Fences `key` (the step a compensation undoes, named by `by`, the compensation's own key) so that no command of
   * that step runs after this: an absent key or a failed record becomes a fence with the completion TTL; a
   * completion is kept (the compensation undoes it); a running holder must finish first.
   * @throws IdempotencyStoreUnavailableError (retryable) when Redis does not answer.
   * @throws ForeignRecordError (not retryable) when the key holds a value this store did not write (also a key of
   * another Redis type).
   */
  async fence(key: string, by: string): Promise<FenceResult> {
    const [state, pttl] = (await this.call('fence', () =>
      this.scripts.keyflowIdemFence(this.k(key), JSON.stringify({ s: 'fenced', by }), this.completionTtlMs),
    )) as [string, string];
    if (state === 'running') return { state, expiresInMs: Math.max(0, Number(pttl)) };
    if (state === 'foreign') throw new ForeignRecordError(this.k(key));
    return { state: state as 'fenced' | 'completed' };
  }

  /**
   * Extends the lease by the lease time, taking it back if the key is gone (nobody else holds the step).
   * @returns false when the lease was lost: another holder, a record or a fence is there now (or a key of another
   * Redis type).
   * @throws IdempotencyStoreUnavailableError (retryable) when Redis does not answer.
   */
  async renew(lease: Lease): Promise<boolean> {
    return (
      (await this.call('renew', () =>
        this.scripts.keyflowIdemRenew(this.k(lease.key), lease.token, this.leaseMs),
      )) === 1
    );
  }

  /**
   * Stores the completion record holding `result` (`ok` false for a failure, which a later attempt may overwrite),
   * only while `lease` is still held or the key is empty (a fenced write: never over another holder's lease, a
   * record or a fence). Completes made in the same event-loop turn share one script call.
   * @returns false when the lease was lost to another holder: nothing was written.
   * @throws IdempotencyStoreUnavailableError (retryable) when Redis does not answer.
   */
  async complete(lease: Lease, result: R, ok = true): Promise<boolean> {
    const request = completeRequest(lease, result, ok);
    return (await this.call('complete', () => this.completes.load(request))) === 1;
  }

  /**
   * {@link complete} for many leases at once: one script call per BATCH_MAX_KEYS keys, without a promise per key.
   * @returns for each item in its place: true when its record was written, false when its lease was lost (nothing
   *   written for it), IdempotencyStoreUnavailableError (retryable) for the items of a call Redis did not answer
   *   (records of such a call Redis ran before the connection failed are written; completing them again finds the
   *   record and returns false). Never rejects for one item's sake.
   */
  async completeMany(
    items: ReadonlyArray<{ lease: Lease; result: R; ok: boolean }>,
  ): Promise<Array<boolean | IdempotencyStoreUnavailableError>> {
    const replies = await this.runChunked<CompleteRequest, number>(
      'complete',
      'keyflowIdemCompleteMany',
      this.completionTtlMs,
      items.map((i) => completeRequest(i.lease, i.result, i.ok)),
      completeArgs,
    );
    return replies.map((r) => (r instanceof IdempotencyStoreUnavailableError ? r : r === 1));
  }

  /** Gives the lease up without a record (the task will be redelivered and run again). */
  async release(lease: Lease): Promise<void> {
    await this.call('release', () => this.scripts.keyflowIdemRelease(this.k(lease.key), lease.token));
  }
}
