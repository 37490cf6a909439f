import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { backoffDelayMs, retryPolicy } from '@keyflow/workflow';
import { SinkBusyError } from '../errors';
import type { EnrichedCity } from '../types';
import { COLUMNS, TableHasher, checkIdentifier, countsRecord, uniqueRows, type SinkRow } from './rows';
import type { CitySink, UpsertResult } from './types';

/** Options of `createSqliteSink`. */
export interface SqliteSinkOptions {
  /** Database file path (created if missing), or ":memory:". */
  readonly path: string;
  /** Table name; default "cities". */
  readonly table?: string;
  /**
   * How long, in ms, a write waits for another connection's writer lock before `SinkBusyError`; default
   * `SQLITE_BUSY_TIMEOUT_MS`.
   */
  readonly busyTimeoutMs?: number;
}

/** Default of `SqliteSinkOptions.busyTimeoutMs`: 30 s. */
export const SQLITE_BUSY_TIMEOUT_MS = 30_000;

/**
 * How long one try waits inside SQLite (its busy handler sleeps in the calling thread, which is the event loop):
 * short, so that a worker keeps renewing its leases and heartbeating while another process writes.
 */
const SQLITE_BLOCKING_WAIT_MS = 20;
/** Pauses between tries: full jitter, the cap doubling from 5 ms up to 200 ms (libs/workflow's retry policy). */
const BUSY_BACKOFF = retryPolicy({ initialDelayMs: 5, maxDelayMs: 200 });

/**
 * Runs `write` (one statement or one `BEGIN IMMEDIATE` transaction, so a busy try has written nothing) until it
 * is not refused with SQLITE_BUSY, waiting between tries without blocking.
 * @throws SinkBusyError (naming `table`) after `busyTimeoutMs`; `signal`'s reason once it aborts; any other error of
 * `write` at once.
 */
async function whenFree<T>(
  write: () => T,
  table: string,
  busyTimeoutMs: number,
  signal?: AbortSignal,
): Promise<T> {
  const started = Date.now();
  for (let attempt = 1; ; attempt += 1) {
    signal?.throwIfAborted();
    try {
      return write();
    } catch (err) {
      if (!isBusy(err)) throw err;
      const waited = Date.now() - started;
      if (waited >= busyTimeoutMs) throw new SinkBusyError(table, waited, { cause: err });
      const pause = Math.min(backoffDelayMs(BUSY_BACKOFF, attempt), busyTimeoutMs - waited);
      // Rejects only when `signal` aborts: the check at the top of the loop then throws its reason.
      await sleep(pause, undefined, { signal }).catch(() => undefined);
    }
  }
}

/**
 * Opens the database file `path` (created if missing; or ":memory:") with synchronous=NORMAL and a short blocking
 * busy wait (`init` switches it to WAL).
 */
function openDatabase(path: string): Database.Database {
  const db = new Database(path);
  db.pragma('synchronous = NORMAL');
  // Several worker processes may load chunks into one file at once. SQLite's own wait for the writer lock blocks
  // the thread, so it is kept short; `whenFree` waits the rest between tries, without blocking.
  db.pragma(`busy_timeout = ${SQLITE_BLOCKING_WAIT_MS}`);
  return db;
}

/** The CREATE TABLE IF NOT EXISTS of table `q` (a quoted identifier). */
function createTableSql(q: string): string {
  return `CREATE TABLE IF NOT EXISTS ${q} (
           natural_key TEXT PRIMARY KEY NOT NULL,
           name TEXT NOT NULL, country TEXT NOT NULL, admin1 TEXT NOT NULL, admin2 TEXT NOT NULL,
           lat REAL NOT NULL, lng REAL NOT NULL,
           country_name TEXT NOT NULL, region TEXT NOT NULL, subregion TEXT NOT NULL, currencies TEXT NOT NULL,
           admin1_name TEXT, admin2_name TEXT
         ) WITHOUT ROWID`;
}

/**
 * A transaction that upserts rows into table `q` (a quoted identifier) by natural key and returns how many rows it
 * inserted or changed. Its statement is prepared on first use (the table exists only after `init`).
 */
function rowsWriter(db: Database.Database, q: string): Database.Transaction<(rows: SinkRow[]) => number> {
  const data = COLUMNS.slice(1);
  let upsertRow: Database.Statement<SinkRow> | undefined;
  const prepare = () =>
    (upsertRow ??= db.prepare<SinkRow>(
      `INSERT INTO ${q} (${COLUMNS.join(', ')}) VALUES (${COLUMNS.map(() => '?').join(', ')})
       ON CONFLICT (natural_key) DO UPDATE SET ${data.map((c) => `${c} = excluded.${c}`).join(', ')}
       WHERE ${data.map((c) => `${c} IS NOT excluded.${c}`).join(' OR ')}`,
    ));
  return db.transaction((rows: SinkRow[]) => {
    let changed = 0;
    for (const row of rows) changed += prepare().run(...row).changes;
    return changed;
  });
}

/** `CitySink.countsBy` of table `q`: rows per country and per region. */
function tableCounts(db: Database.Database, q: string): Awaited<ReturnType<CitySink['countsBy']>> {
  const group = (col: string) =>
    (
      db.prepare(`SELECT ${col}, count(*) FROM ${q} GROUP BY ${col}`).raw(true).all() as [string, number][]
    ).map(([k, n]) => [k, n] as const);
  return { byCountry: countsRecord(group('country')), byRegion: countsRecord(group('region'), true) };
}

/**
 * A `CitySink` over a SQLite file with better-sqlite3 (synchronous calls behind the async interface). The file
 * is put in WAL mode with synchronous=NORMAL: a committed chunk survives a process crash; a power loss may
 * drop the last chunks, which a re-run upserts again. Call `init()` before the other methods.
 * Writers of one file take turns (SQLite has one writer lock): a write refused with SQLITE_BUSY is tried again
 * after a jittered pause that does not block the event loop, for up to `busyTimeoutMs`, then `SinkBusyError`.
 */
export function createSqliteSink(options: SqliteSinkOptions): CitySink {
  const table = checkIdentifier(options.table ?? 'cities');
  const db = openDatabase(options.path);
  const busyTimeoutMs = options.busyTimeoutMs ?? SQLITE_BUSY_TIMEOUT_MS;
  const q = `"${table}"`;
  const writeAll = rowsWriter(db, q);
  const whenFreeHere = <T>(write: () => T, signal?: AbortSignal) =>
    whenFree(write, table, busyTimeoutMs, signal);

  const sink: CitySink = {
    table,
    async init() {
      // Switching a new file to WAL takes the writer lock: another process may be creating the same file.
      await whenFreeHere(() => db.pragma('journal_mode = WAL'));
      await whenFreeHere(() => db.exec(createTableSql(q)));
    },
    async upsert(cities: readonly EnrichedCity[], opts?: { signal?: AbortSignal }): Promise<UpsertResult> {
      const rows = uniqueRows(cities);
      if (rows.length === 0) return { rows: 0, changed: 0 };
      return { rows: rows.length, changed: await whenFreeHere(() => writeAll.immediate(rows), opts?.signal) };
    },
    async count() {
      return (db.prepare(`SELECT count(*) AS n FROM ${q}`).get() as { n: number }).n;
    },
    async checksum() {
      const hasher = new TableHasher();
      const stmt = db.prepare(`SELECT ${COLUMNS.join(', ')} FROM ${q} ORDER BY natural_key`).raw(true);
      for (const row of stmt.iterate() as IterableIterator<unknown[]>) hasher.add(row);
      return hasher.digest();
    },
    async countsBy() {
      return tableCounts(db, q);
    },
    async summary() {
      const [rows, checksum, counts] = [await sink.count(), await sink.checksum(), await sink.countsBy()];
      return { rows, checksum, ...counts };
    },
    async close() {
      if (db.open) db.close();
    },
  };
  return sink;
}

/**
 * Whether `err` is SQLite's SQLITE_BUSY (or an extended code of it): by its `code`, not `instanceof SqliteError`,
 * since better-sqlite3's native part keeps the class of the first module instance that loaded it.
 */
function isBusy(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}
