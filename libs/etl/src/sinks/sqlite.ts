import Database from 'better-sqlite3';
import type { EnrichedCity } from '../types';
import { COLUMNS, TableHasher, checkIdentifier, countsRecord, uniqueRows, type SinkRow } from './rows';
import type { CitySink, UpsertResult } from './types';

/** Options of `createSqliteSink`. */
export interface SqliteSinkOptions {
  /** Database file path (created if missing), or ":memory:". */
  readonly path: string;
  /** Table name; default "cities". */
  readonly table?: string;
}

/**
 * A `CitySink` over a SQLite file with better-sqlite3 (synchronous calls behind the async interface). The file
 * is opened in WAL mode with synchronous=NORMAL: a committed chunk survives a process crash; a power loss may
 * drop the last chunks, which a re-run upserts again. Call `init()` before the other methods.
 */
export function createSqliteSink(options: SqliteSinkOptions): CitySink {
  const table = checkIdentifier(options.table ?? 'cities');
  const db = new Database(options.path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  // Several worker processes may load chunks into one file at once: wait for the writer lock, up to 30 s.
  db.pragma('busy_timeout = 30000');
  const q = `"${table}"`;
  const data = COLUMNS.slice(1);

  let upsertRow: Database.Statement<SinkRow> | undefined;
  const prepare = () =>
    (upsertRow ??= db.prepare<SinkRow>(
      `INSERT INTO ${q} (${COLUMNS.join(', ')}) VALUES (${COLUMNS.map(() => '?').join(', ')})
       ON CONFLICT (natural_key) DO UPDATE SET ${data.map((c) => `${c} = excluded.${c}`).join(', ')}
       WHERE ${data.map((c) => `${c} IS NOT excluded.${c}`).join(' OR ')}`,
    ));
  const writeAll = db.transaction((rows: SinkRow[]) => {
    let changed = 0;
    for (const row of rows) changed += prepare().run(...row).changes;
    return changed;
  });

  const sink: CitySink = {
    table,
    async init() {
      db.exec(
        `CREATE TABLE IF NOT EXISTS ${q} (
           natural_key TEXT PRIMARY KEY NOT NULL,
           name TEXT NOT NULL, country TEXT NOT NULL, admin1 TEXT NOT NULL, admin2 TEXT NOT NULL,
           lat REAL NOT NULL, lng REAL NOT NULL,
           country_name TEXT NOT NULL, region TEXT NOT NULL, subregion TEXT NOT NULL, currencies TEXT NOT NULL,
           admin1_name TEXT, admin2_name TEXT
         ) WITHOUT ROWID`,
      );
    },
    async upsert(cities: readonly EnrichedCity[]): Promise<UpsertResult> {
      const rows = uniqueRows(cities);
      if (rows.length === 0) return { rows: 0, changed: 0 };
      return { rows: rows.length, changed: writeAll(rows) };
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
      const group = (col: string) =>
        (
          db.prepare(`SELECT ${col}, count(*) FROM ${q} GROUP BY ${col}`).raw(true).all() as [
            string,
            number,
          ][]
        ).map(([k, n]) => [k, n] as const);
      return { byCountry: countsRecord(group('country')), byRegion: countsRecord(group('region'), true) };
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
