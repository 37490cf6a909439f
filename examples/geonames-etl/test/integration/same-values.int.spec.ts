// Issue 11: one file of awkward values loads the same values into SQLite and PostgreSQL. Before, a NUL loaded into
// SQLite and failed the PostgreSQL transaction, and bytes that are not UTF-8 loaded into both as U+FFFD.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Pool } from 'pg';
import {
  COLUMNS,
  createPostgresSink,
  createSqliteSink,
  loadReferenceData,
  processChunk,
  readRecords,
  type RawRecord,
} from '../../src/lib';
import { collect } from '../unit/fixtures';

const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A CSV with a BOM, CRLF ends and, row by row, the values the readers must keep, trim, parse or reject. */
function awkwardCsv(): Buffer {
  const rows: Array<string | number[]> = [
    [0xef, 0xbb, 0xbf],
    'name,lat,lng,country,admin1,admin2\r\n',
    'Z\uFFFDrich (a real U+FFFD),47.36667,8.55,CH,ZH,112\r\n', // valid UTF-8: kept
    'Zu\u0308rich,47.37,8.54,ch , ZH ,\r\n', // NFC name, trimmed country and admin code
    '"  Padded  ",  45.5 ,  -7.25  ,FR,11,75\r\n', // padded numbers trimmed
    'Exponent,4.55e1,-7.25E0,IT,09,\r\n', // exponent notation is a number
    '"Line\r\nbreak, quoted",10,-0,PT,,\r\n', // quoted CRLF and comma kept; -0 stored as 0
    'Emoji \u{1F600},35.6895,139.69171,JP,40,\r\n', // 4-byte UTF-8 kept
    'Bad ',
    [0xc3, 0x28],
    ' bytes,1,1,FR,,\r\n', // not UTF-8 → INVALID_ENCODING
    'Nul\u0000name,1,1,FR,,\r\n', // NUL → NUL_CHARACTER
    'Comma,"45,5",7,FR,,\r\n', // decimal comma → DECIMAL_COMMA
  ];
  return Buffer.concat(rows.map((r) => (typeof r === 'string' ? Buffer.from(r, 'utf8') : Buffer.from(r))));
}

describe('SQLite and PostgreSQL sinks', () => {
  const pool = new Pool({ connectionString: POSTGRES_URL, max: 2 });
  const table = `etl_same_${process.pid}_${Date.now().toString(36)}`;
  let dir: string;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'etl-same-values-'));
  });
  afterAll(async () => {
    await pool.query(`DROP TABLE IF EXISTS "${table}"`);
    await pool.end();
    rmSync(dir, { recursive: true, force: true });
  });

  it('receive the same values for the same file, and only the records the readers accept', async () => {
    const path = join(dir, 'awkward.csv');
    writeFileSync(path, awkwardCsv());
    const records: RawRecord[] = await collect(readRecords(path));
    const out = processChunk(records, loadReferenceData());
    expect(out.rejects.map((r) => r.reason)).toEqual(['INVALID_ENCODING', 'NUL_CHARACTER', 'DECIMAL_COMMA']);
    expect(out.accepted).toHaveLength(6);

    const litePath = join(dir, 'same.sqlite');
    const lite = createSqliteSink({ path: litePath, table });
    const pg = createPostgresSink({ pool, table });
    for (const sink of [lite, pg]) {
      await sink.init();
      expect(await sink.upsert(out.accepted)).toEqual({ rows: 6, changed: 6 });
    }
    const [liteSummary, pgSummary] = [await lite.summary(), await pg.summary()];
    await lite.close();
    await pg.close();
    expect(pgSummary).toEqual(liteSummary);

    // Value by value, not only the checksum: what each database hands back.
    const cols = COLUMNS.join(', ');
    const db = new Database(litePath, { readonly: true });
    const liteRows = db.prepare(`SELECT ${cols} FROM "${table}" ORDER BY natural_key`).all();
    db.close();
    const pgRows = (await pool.query(`SELECT ${cols} FROM "${table}" ORDER BY natural_key COLLATE "C"`)).rows;
    expect(pgRows).toEqual(liteRows);
    const byName = Object.fromEntries(
      (pgRows as Array<{ name: string; lat: number; lng: number; country: string; admin1: string }>).map(
        (r) => [r.name, r],
      ),
    );
    expect(Object.keys(byName).sort()).toEqual(
      [
        'Z\uFFFDrich (a real U+FFFD)',
        'Z\u00fcrich',
        'Padded',
        'Exponent',
        'Line\r\nbreak, quoted',
        'Emoji \u{1F600}',
      ].sort(),
    );
    expect(byName['Z\u00fcrich']).toMatchObject({ country: 'CH', admin1: 'ZH' });
    expect(byName.Padded).toMatchObject({ lat: 45.5, lng: -7.25 });
    expect(byName.Exponent).toMatchObject({ lat: 45.5, lng: -7.25 });
    expect(Object.is(byName['Line\r\nbreak, quoted'].lng, 0)).toBe(true);
  });
});
