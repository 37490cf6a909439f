import { Pool, type PoolClient } from 'pg';
import type { EnrichedCity } from '../types';
import { COLUMNS, TableHasher, checkIdentifier, countsRecord, uniqueRows } from './rows';
import type { CitySink, UpsertResult } from './types';

/** Options of `createPostgresSink`: a pool to borrow, or a connection string to open (and close) one. */
export type PostgresSinkOptions = { readonly table?: string } & (
  | { readonly pool: Pool; readonly connectionString?: undefined }
  | { readonly connectionString: string; readonly pool?: undefined }
);

/** PostgreSQL type of each column, in `COLUMNS` order (also the unnest array types of the upsert). */
const TYPES = [
  'text',
  'text',
  'text',
  'text',
  'text',
  'float8',
  'float8',
  'text',
  'text',
  'text',
  'text',
  'text',
  'text',
];

/** Connections of one `PostgresPools` pool: what one worker process opens to one database, ETL loads included. */
export const POSTGRES_POOL_MAX = 4;

/** `application_name` of the connections `PostgresPools` opens (pg_stat_activity shows it). */
export const POSTGRES_SINK_APPLICATION = 'keyflow-etl-sink';

/**
 * One node-postgres pool per connection string, for the sinks a process opens (each ETL load task opens one):
 * the process holds at most `POSTGRES_POOL_MAX` connections per database however many loads run at once.
 * An idle connection that fails (a server restart) is dropped by the pool and reported to `onError`; the next
 * query opens a new one. `end()` closes them all (after the tasks using them are done).
 */
export class PostgresPools {
  private readonly pools = new Map<string, Pool>();
  constructor(private readonly onError: (err: Error) => void = () => undefined) {}

  /** The pool of `connectionString`, opened on first use. */
  get(connectionString: string): Pool {
    let pool = this.pools.get(connectionString);
    if (!pool) {
      pool = new Pool({
        connectionString,
        max: POSTGRES_POOL_MAX,
        application_name: POSTGRES_SINK_APPLICATION,
      });
      pool.on('error', this.onError);
      this.pools.set(connectionString, pool);
    }
    return pool;
  }

  async end(): Promise<void> {
    const pools = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(pools.map((p) => p.end()));
  }
}

/**
 * SQLSTATEs of a CREATE TABLE IF NOT EXISTS that lost a race with another session creating the same table:
 * 23505 (unique_violation, on pg_type's name index), 42P07 (duplicate_table) and 42710 (duplicate_object: `type
 * "<table>" already exists`, the table's row type, as PostgreSQL 15 reports it). The same 42710 also means a type of
 * that name made by other means, so `init` then checks that the table exists.
 */
const CREATED_CONCURRENTLY = new Set(['23505', '42P07', '42710']);

/** Rows fetched per round trip by `checksum`. */
const PAGE = 5000;

/**
 * The upsert of a whole chunk into table `q` (a quoted identifier): `INSERT ... SELECT FROM unnest(arrays) ON CONFLICT
 * (natural_key) DO UPDATE ... WHERE row differs`, one array parameter per column in `COLUMNS` order.
 */
function upsertStatement(q: string): string {
  const data = COLUMNS.slice(1);
  return `INSERT INTO ${q} (${COLUMNS.join(', ')})
    SELECT * FROM unnest(${TYPES.map((t, i) => `$${i + 1}::${t}[]`).join(', ')})
    ON CONFLICT (natural_key) DO UPDATE SET ${data.map((c) => `${c} = EXCLUDED.${c}`).join(', ')}
    WHERE (${data.map((c) => `${q}.${c}`).join(', ')}) IS DISTINCT FROM (${data.map((c) => `EXCLUDED.${c}`).join(', ')})`;
}

/**
 * Runs `work` on one client of `pool` inside a transaction opened with `begin` (a BEGIN statement), committing after
 * it; rolls back and rethrows `work`'s (or COMMIT's) error. The client goes back to the pool either way.
 */
async function inTransaction<T>(
  pool: Pool,
  begin: string,
  work: (client: PoolClient) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query(begin);
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/**
 * Creates table `q` (a quoted identifier) if it is missing. A creation that lost a race with another session is
 * fine once the table is there.
 * @throws the CREATE TABLE's error when it is not a lost race, or when no table of that name exists after it
 */
async function createTable(pool: Pool, q: string): Promise<void> {
  try {
    await pool.query(
      `CREATE TABLE IF NOT EXISTS ${q} (
         natural_key text COLLATE "C" PRIMARY KEY,
         name text NOT NULL, country text NOT NULL, admin1 text NOT NULL, admin2 text NOT NULL,
         lat float8 NOT NULL, lng float8 NOT NULL,
         country_name text NOT NULL, region text NOT NULL, subregion text NOT NULL, currencies text NOT NULL,
         admin1_name text, admin2_name text
       )`,
    );
  } catch (err) {
    if (!CREATED_CONCURRENTLY.has((err as { code?: string }).code ?? '')) throw err;
    // Another session created it meanwhile, or a type or relation of that name was there before: only the first
    // is fine (the second would fail every upsert with a less clear error).
    // (A composite type made with CREATE TYPE has a pg_class row too, of kind 'c': only a table counts.)
    const { rows } = await pool.query<{ table: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass($1) AND relkind IN ('r', 'p')) AS table`,
      [q],
    );
    if (!rows[0]?.table) throw err;
  }
}

/** `CitySink.checksum` of table `q`: pages of `PAGE` rows in key order, inside one REPEATABLE READ snapshot. */
function tableChecksum(pool: Pool, q: string): Promise<string> {
  return inTransaction(pool, 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY', async (client) => {
    const hasher = new TableHasher();
    let after = '';
    for (;;) {
      const { rows } = await client.query<unknown[]>({
        text: `SELECT ${COLUMNS.join(', ')} FROM ${q} WHERE natural_key > $1 ORDER BY natural_key LIMIT ${PAGE}`,
        values: [after],
        rowMode: 'array',
      });
      for (const row of rows) hasher.add(row);
      if (rows.length < PAGE) return hasher.digest();
      after = rows[rows.length - 1][0] as string;
    }
  });
}

/** `CitySink.countsBy` of table `q`: rows per country, then per region. */
async function tableCounts(pool: Pool, q: string): ReturnType<CitySink['countsBy']> {
  const group = async (col: string) => {
    const { rows } = await pool.query<[string, string]>({
      text: `SELECT ${col}, count(*) FROM ${q} GROUP BY ${col}`,
      rowMode: 'array',
    });
    return rows.map(([k, n]) => [k, Number(n)] as const);
  };
  return {
    byCountry: countsRecord(await group('country')),
    byRegion: countsRecord(await group('region'), true),
  };
}

/**
 * A `CitySink` over a PostgreSQL table with node-postgres. `upsert` sends a whole chunk as one
 * `INSERT ... SELECT FROM unnest(arrays) ON CONFLICT (natural_key) DO UPDATE ... WHERE row differs` in one
 * transaction (13 parameters whatever the chunk size). `natural_key` uses the "C" collation so its order is
 * byte order, as in SQLite, and `checksum` pages through it in key order inside one REPEATABLE READ snapshot.
 */
export function createPostgresSink(options: PostgresSinkOptions): CitySink {
  const table = checkIdentifier(options.table ?? 'cities');
  const owned = options.pool === undefined;
  const pool = options.pool ?? new Pool({ connectionString: options.connectionString, max: 2 });
  const q = `"${table}"`;
  const upsertSql = upsertStatement(q);

  const sink: CitySink = {
    table,
    init: () => createTable(pool, q),
    async upsert(cities: readonly EnrichedCity[]): Promise<UpsertResult> {
      const rows = uniqueRows(cities);
      if (rows.length === 0) return { rows: 0, changed: 0 };
      const columns = COLUMNS.map((_, i) => rows.map((row) => row[i]));
      const changed = await inTransaction(
        pool,
        'BEGIN',
        async (client) => (await client.query(upsertSql, columns)).rowCount,
      );
      return { rows: rows.length, changed: changed ?? 0 };
    },
    async count() {
      const { rows } = await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${q}`);
      return Number(rows[0].n);
    },
    checksum: () => tableChecksum(pool, q),
    countsBy: () => tableCounts(pool, q),
    async summary() {
      const [rows, checksum, counts] = [await sink.count(), await sink.checksum(), await sink.countsBy()];
      return { rows, checksum, ...counts };
    },
    async close() {
      if (owned) await pool.end();
    },
  };
  return sink;
}
