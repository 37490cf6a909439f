import { Pool } from 'pg';
import { PgBlobStore, BlobNotFoundError, BlobCorruptError, supersededExpiry } from '../../src';

const URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

describe('the PostgreSQL blob store', () => {
  const schema = `keyflow_blobs_t${process.pid}_${Date.now().toString(36)}`;
  const store = new PgBlobStore({ url: URL, schema, chunkBytes: 64 * 1024 });
  const pg = new Pool({ connectionString: URL, max: 1 });
  afterAll(async () => {
    await store.close();
    await pg.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await pg.end();
  });

  it('stores a blob larger than one chunk in several bytea rows and reads the same bytes, size and hash', async () => {
    const data = Buffer.alloc(300 * 1024 + 7);
    for (let i = 0; i < data.length; i++) data[i] = (i * 31) & 0xff;
    const r = await store.put('runs/r1/raw/chunk-00000.jsonl', data);
    expect(r.ref).toBe('blob:runs/r1/raw/chunk-00000.jsonl');
    expect(r.sizeBytes).toBe(data.length);
    const rows = await pg.query(`SELECT count(*)::int AS n FROM ${schema}.blob_chunks WHERE key = $1`, [
      r.key,
    ]);
    expect(rows.rows[0].n).toBe(5);
    expect((await store.get(r.ref)).equals(data)).toBe(true);
    const streamed: Buffer[] = [];
    for await (const c of store.stream(r.ref)) streamed.push(c);
    expect(Buffer.concat(streamed).equals(data)).toBe(true);
    await expect(store.stat(r.ref)).resolves.toMatchObject({ sizeBytes: data.length, sha256: r.sha256 });
  });

  it('a second store on another connection (another host) reads what the first wrote; a rewrite replaces it whole', async () => {
    const other = new PgBlobStore({ url: URL, schema });
    try {
      await store.put('shared/a', 'first version, longer than the second');
      await expect(other.get('blob:shared/a').then(String)).resolves.toBe(
        'first version, longer than the second',
      );
      await other.put('shared/a', 'second');
      await expect(store.get('shared/a').then(String)).resolves.toBe('second');
    } finally {
      await other.close();
    }
  });

  it('damaged bytes are refused with BLOB_CORRUPT instead of being returned', async () => {
    await store.put('damaged/x', 'hello');
    await pg.query(`UPDATE ${schema}.blob_chunks SET data = 'jello'::bytea WHERE key = 'damaged/x'`);
    await expect(store.get('damaged/x')).rejects.toBeInstanceOf(BlobCorruptError);
  });

  it('the sweeper deletes exactly the blobs past their expiry, chunks included; unexpired and kept blobs stay', async () => {
    const now = Date.now();
    await store.put('sweep/expired', 'x'.repeat(100_000), { expiresAt: now - 1 });
    await store.put('sweep/due-now', 'y', { expiresAt: now });
    await store.put('sweep/later', 'z', { expiresAt: now + 60_000 });
    await store.put('sweep/kept', 'k', { expiresAt: null });
    const deleted = await store.sweep(now);
    expect(deleted.filter((k) => k.startsWith('sweep/'))).toEqual(['sweep/due-now', 'sweep/expired']);
    await expect(store.get('sweep/expired')).rejects.toBeInstanceOf(BlobNotFoundError);
    const orphans = await pg.query(
      `SELECT count(*)::int AS n FROM ${schema}.blob_chunks WHERE key LIKE 'sweep/e%'`,
    );
    expect(orphans.rows[0].n).toBe(0);
    await expect(store.get('sweep/later').then(String)).resolves.toBe('z');
    await expect(store.get('sweep/kept').then(String)).resolves.toBe('k');
  });

  it('superseded snapshot blobs get an expiry, the latest stays kept', async () => {
    await store.put('state/run-1/1', 'a');
    await store.put('state/run-1/2', 'b');
    await store.put('state/run-1/3', 'c');
    const at = supersededExpiry(Date.now(), 0);
    expect(await store.expire('state/run-1/', at, 'state/run-1/3')).toBe(2);
    expect((await store.stat('state/run-1/1'))!.expiresAt).toBe(at);
    expect((await store.stat('state/run-1/3'))!.expiresAt).toBeNull();
    expect((await store.sweep(at)).filter((k) => k.startsWith('state/'))).toEqual([
      'state/run-1/1',
      'state/run-1/2',
    ]);
  });

  it('expire(prefix) of one run reads the key index, never the whole table (20,000 unrelated blobs)', async () => {
    await store.put('state/mine/1', 'a');
    await pg.query(
      `INSERT INTO ${schema}.blobs (key, size_bytes, sha256, created_at, expires_at)
       SELECT 'state/other-' || g || '/1', 1, 'x', 0, NULL FROM generate_series(1, 20000) g`,
    );
    await pg.query(`ANALYZE ${schema}.blobs`);
    // The statement the store sends, explained (not run) with the same parameters.
    const sent: Array<{ text: string; values: unknown[] }> = [];
    const spy = jest.spyOn(Pool.prototype, 'query');
    try {
      expect(await store.expire('state/mine/', 42)).toBe(1);
      for (const call of spy.mock.calls)
        if (typeof call[0] === 'string' && /^\s*UPDATE/i.test(call[0]))
          sent.push({ text: call[0], values: call[1] as unknown[] });
    } finally {
      spy.mockRestore();
    }
    expect(sent).toHaveLength(1);
    const plan = await pg.query(`EXPLAIN ${sent[0].text}`, sent[0].values);
    const text = plan.rows.map((r: Record<string, string>) => r['QUERY PLAN']).join('\n');
    expect(text).not.toMatch(/Seq Scan/);
    expect(text).toMatch(/Index (Only )?Scan/);
    // Bounded on both sides: the scan stops at the end of the prefix, not at the end of the index.
    expect(text).toMatch(/Index Cond:.*>=.*<.*/);
  });
});
