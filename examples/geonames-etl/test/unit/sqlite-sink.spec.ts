import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import {
  createSqliteSink,
  loadReferenceData,
  SinkBusyError,
  processChunk,
  type CitySink,
  type EnrichedCity,
} from '../../src/lib';
import { FIXTURE_RECORDS } from './fixtures';

const ref = loadReferenceData();
const cities = processChunk(FIXTURE_RECORDS, ref).accepted;

describe('SQLite sink', () => {
  let dir: string;
  let path: string;
  let sink: CitySink;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'etl-sqlite-'));
    path = join(dir, 'etl.db');
    sink = createSqliteSink({ path, table: 'cities' });
    await sink.init();
  });
  afterEach(async () => {
    await sink.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('upserting the same chunk twice leaves the same rows and checksum, and changes nothing the second time', async () => {
    const first = await sink.upsert(cities);
    const afterFirst = { rows: await sink.count(), checksum: await sink.checksum() };
    const second = await sink.upsert(cities);
    expect(first).toEqual({ rows: 6, changed: 6 });
    expect(second).toEqual({ rows: 6, changed: 0 });
    expect(afterFirst.rows).toBe(6);
    expect(afterFirst.checksum).toMatch(/^[0-9a-f]{64}$/);
    expect({ rows: await sink.count(), checksum: await sink.checksum() }).toEqual(afterFirst);
  });

  it('gives the same checksum whatever the insertion order and after reopening the file', async () => {
    await sink.upsert(cities);
    const checksum = await sink.checksum();
    await sink.close();
    const other = createSqliteSink({ path: join(dir, 'other.db') });
    await other.init();
    await other.upsert([...cities].reverse().slice(0, 3));
    await other.upsert([...cities].reverse().slice(3));
    expect(await other.checksum()).toBe(checksum);
    await other.close();
    sink = createSqliteSink({ path });
    await sink.init();
    expect(await sink.checksum()).toBe(checksum);
  });

  it('updates a row in place when its content changes under the same natural key', async () => {
    await sink.upsert(cities);
    const before = await sink.checksum();
    const renamed: EnrichedCity = { ...cities[2], admin2Name: 'Paris (ville)' };
    expect(await sink.upsert([renamed])).toEqual({ rows: 1, changed: 1 });
    expect(await sink.count()).toBe(6);
    expect(await sink.checksum()).not.toBe(before);
    const db = new Database(path, { readonly: true });
    const row = db
      .prepare('SELECT admin2_name FROM cities WHERE country = ? AND name = ?')
      .get('FR', 'Paris');
    db.close();
    expect(row).toEqual({ admin2_name: 'Paris (ville)' });
  });

  it('writes one row per natural key when a chunk repeats a key (the last wins)', async () => {
    const a = cities[0];
    expect(await sink.upsert([a, { ...a, admin2Name: 'x' }])).toEqual({ rows: 1, changed: 1 });
    expect(await sink.count()).toBe(1);
  });

  it('writes a chunk all or nothing', async () => {
    await sink.upsert(cities.slice(0, 2));
    const broken = { ...cities[3], name: null } as unknown as EnrichedCity;
    // Not `rejects.toThrow`: better-sqlite3's native part keeps the SqliteError class of the first test file that
    // loaded it, and in a later file (another jest realm) toThrow reports "did not throw" for it.
    await expect(sink.upsert([cities[4], broken])).rejects.toHaveProperty(
      'message',
      expect.stringMatching(/NOT NULL/),
    );
    expect(await sink.count()).toBe(2);
  });

  // Another worker process loading into the same file holds SQLite's single writer lock. better-sqlite3 is
  // synchronous: a busy wait inside SQLite (busy_timeout) would stop the whole worker (lease renewals, Kafka
  // heartbeats) for as long as the other writer holds the lock.
  it("an upsert waiting for another connection's write lock leaves the event loop free, then lands", async () => {
    const other = new Database(path);
    other.exec('BEGIN IMMEDIATE');
    let settled = false;
    const pending = sink.upsert(cities).finally(() => (settled = true));
    await new Promise<void>((resolve) => setImmediate(resolve));
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    other.exec('COMMIT');
    other.close();
    await expect(pending).resolves.toEqual({ rows: 6, changed: 6 });
    expect(await sink.count()).toBe(6);
  }, 40_000);

  it('an upsert still locked out after busyTimeoutMs fails with a retryable SinkBusyError and writes nothing', async () => {
    const patient = createSqliteSink({ path, table: 'cities', busyTimeoutMs: 300 });
    const other = new Database(path);
    other.exec('BEGIN IMMEDIATE');
    try {
      const err = await patient.upsert(cities).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(SinkBusyError);
      expect(err).toMatchObject({ code: 'SINK_BUSY', retryable: true });
    } finally {
      other.exec('ROLLBACK');
      other.close();
      await patient.close();
    }
    expect(await sink.count()).toBe(0);
  }, 40_000);

  // A worker stopping (SIGTERM) or losing its lease aborts the task's signal: a load waiting for the lock gives up.
  it('an upsert waiting for the write lock gives up when its signal aborts, and writes nothing', async () => {
    const other = new Database(path);
    other.exec('BEGIN IMMEDIATE');
    const stop = new AbortController();
    try {
      const pending = sink.upsert(cities, { signal: stop.signal }).then(
        () => undefined,
        (e: unknown) => e,
      );
      await new Promise<void>((resolve) => setImmediate(resolve));
      stop.abort(new Error('worker stopping'));
      await expect(pending).resolves.toHaveProperty('message', 'worker stopping');
    } finally {
      other.exec('ROLLBACK');
      other.close();
    }
    expect(await sink.count()).toBe(0);
  }, 40_000);

  it('counts rows per country and region', async () => {
    await sink.upsert(cities);
    expect(await sink.countsBy()).toEqual({
      byCountry: { AD: 1, CA: 1, CH: 2, FR: 1, JP: 1 },
      byRegion: { Americas: 1, Asia: 1, Europe: 4 },
    });
    const summary = await sink.summary();
    expect(summary).toMatchObject({ rows: 6, checksum: await sink.checksum() });
  });

  it('creates the table only once and refuses unsafe table names', async () => {
    await sink.upsert(cities);
    await sink.init();
    expect(await sink.count()).toBe(6);
    expect(() => createSqliteSink({ path: ':memory:', table: 'x; DROP TABLE cities' })).toThrow(
      /invalid table name/,
    );
  });
});
