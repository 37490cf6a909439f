import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { Pool } from 'pg';
import { BlobCorruptError, BlobNotFoundError, InvalidBlobKeyError } from './errors';
import {
  BLOB_REF_PREFIX,
  blobKey,
  sha256,
  toBuffer,
  type BlobInfo,
  type BlobStore,
  type PutOptions,
} from './store';

/** Bytes per bytea row: large blobs are split so no row nears PostgreSQL's 1 GB field limit or a huge TOAST read. */
export const PG_BLOB_CHUNK_BYTES = 1024 * 1024;

/** Blobs one statement of a sweep deletes. */
export const PG_SWEEP_BATCH = 1_000;

/**
 * The smallest text above every text starting with `prefix`, in byte order (the last character incremented);
 * null for the empty prefix (no bound).
 */
function prefixUpperBound(prefix: string): string | null {
  if (prefix === '') return null;
  const last = prefix.codePointAt(prefix.length - 1)!;
  return prefix.slice(0, -1) + String.fromCodePoint(last + 1);
}

export interface PgBlobStoreOptions {
  /** postgres:// connection string. */
  url: string;
  /** Schema holding the tables `blobs` and `blob_chunks` (created if missing). Default `keyflow_blobs`. */
  schema?: string;
  /** Bytes per chunk row (default {@link PG_BLOB_CHUNK_BYTES}). */
  chunkBytes?: number;
  /** Pool size (default 4). */
  maxConnections?: number;
}

interface Row {
  key: string;
  size_bytes: string;
  sha256: string;
  created_at: string;
  expires_at: string | null;
}
const info = (r: Row): BlobInfo => ({
  key: r.key,
  sizeBytes: Number(r.size_bytes),
  sha256: r.sha256,
  createdAt: Number(r.created_at),
  expiresAt: r.expires_at === null ? null : Number(r.expires_at),
});

/**
 * Blob store in PostgreSQL, shared by every host of a deployment: `<schema>.blobs` (key, size in bytes, SHA-256,
 * created/expires in ms since the epoch) and `<schema>.blob_chunks` (key, seq, bytea of at most `chunkBytes`).
 * A put replaces a key's chunks and info in one transaction. Tables are created on first use.
 */
export class PgBlobStore implements BlobStore {
  readonly schema: string;
  private readonly pool: Pool;
  private readonly chunkBytes: number;
  private ready?: Promise<void>;

  constructor(opts: PgBlobStoreOptions) {
    this.schema = opts.schema ?? 'keyflow_blobs';
    if (!/^[a-z_][a-z0-9_]*$/.test(this.schema)) throw new InvalidBlobKeyError(this.schema);
    this.chunkBytes = opts.chunkBytes ?? PG_BLOB_CHUNK_BYTES;
    this.pool = new Pool({ connectionString: opts.url, max: opts.maxConnections ?? 4 });
    this.pool.on('error', () => undefined); // an idle client's error surfaces on the next query
  }

  get describe(): string {
    return `postgres:${this.schema}`;
  }

  /** Creates the schema and tables when missing (idempotent, safe when several processes start at once). */
  init(): Promise<void> {
    this.ready ??= (async () => {
      const c = await this.pool.connect();
      try {
        await c.query('BEGIN');
        // Serialise concurrent creators: CREATE ... IF NOT EXISTS races on the catalog otherwise.
        await c.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`keyflow-blobs:${this.schema}`]);
        await c.query(`CREATE SCHEMA IF NOT EXISTS ${this.schema}`);
        await c.query(`CREATE TABLE IF NOT EXISTS ${this.schema}.blobs (
          key text PRIMARY KEY, size_bytes bigint NOT NULL, sha256 text NOT NULL,
          created_at bigint NOT NULL, expires_at bigint)`);
        await c.query(`CREATE TABLE IF NOT EXISTS ${this.schema}.blob_chunks (
          key text NOT NULL REFERENCES ${this.schema}.blobs(key) ON DELETE CASCADE,
          seq int NOT NULL, data bytea NOT NULL, PRIMARY KEY (key, seq))`);
        await c.query(`CREATE INDEX IF NOT EXISTS blobs_expires_at ON ${this.schema}.blobs (expires_at)`);
        // Byte order, whatever the database's collation: expire by prefix is a range scan of it (keys are ASCII).
        await c.query(`CREATE INDEX IF NOT EXISTS blobs_key_bytes ON ${this.schema}.blobs (key COLLATE "C")`);
        await c.query('COMMIT');
      } catch (e) {
        await c.query('ROLLBACK').catch(() => undefined);
        this.ready = undefined;
        throw e;
      } finally {
        c.release();
      }
    })();
    return this.ready;
  }

  async put(key: string, data: string | Buffer, opts: PutOptions = {}): Promise<BlobInfo & { ref: string }> {
    const k = blobKey(key);
    const buf = toBuffer(data);
    await this.init();
    const i: BlobInfo = {
      key: k,
      sizeBytes: buf.length,
      sha256: sha256(buf),
      createdAt: opts.createdAt ?? Date.now(),
      expiresAt: opts.expiresAt ?? null,
    };
    const c = await this.pool.connect();
    try {
      await c.query('BEGIN');
      await c.query(
        `INSERT INTO ${this.schema}.blobs (key, size_bytes, sha256, created_at, expires_at) VALUES ($1,$2,$3,$4,$5)
         ON CONFLICT (key) DO UPDATE SET size_bytes = $2, sha256 = $3, created_at = $4, expires_at = $5`,
        [k, i.sizeBytes, i.sha256, i.createdAt, i.expiresAt],
      );
      await c.query(`DELETE FROM ${this.schema}.blob_chunks WHERE key = $1`, [k]);
      for (let seq = 0, off = 0; off < buf.length || seq === 0; seq++, off += this.chunkBytes)
        await c.query(`INSERT INTO ${this.schema}.blob_chunks (key, seq, data) VALUES ($1,$2,$3)`, [
          k,
          seq,
          buf.subarray(off, off + this.chunkBytes),
        ]);
      await c.query('COMMIT');
    } catch (e) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw e;
    } finally {
      c.release();
    }
    return { ...i, ref: `${BLOB_REF_PREFIX}${k}` };
  }

  /** The blob's chunks in order, one query each (a big ETL chunk never sits in memory twice). */
  async *stream(refOrKey: string): AsyncGenerator<Buffer> {
    const i = await this.stat(refOrKey);
    if (!i) throw new BlobNotFoundError(blobKey(refOrKey));
    for (let seq = 0; ; seq++) {
      const r = await this.pool.query<{ data: Buffer }>(
        `SELECT data FROM ${this.schema}.blob_chunks WHERE key = $1 AND seq = $2`,
        [i.key, seq],
      );
      if (r.rows.length === 0) return;
      yield r.rows[0].data;
    }
  }

  async get(refOrKey: string): Promise<Buffer> {
    const k = blobKey(refOrKey);
    await this.init();
    const c = await this.pool.connect();
    try {
      // One snapshot for info and chunks, so a concurrent put is seen whole or not at all.
      await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const m = await c.query<Row>(`SELECT * FROM ${this.schema}.blobs WHERE key = $1`, [k]);
      if (m.rows.length === 0) throw new BlobNotFoundError(k);
      const r = await c.query<{ data: Buffer }>(
        `SELECT data FROM ${this.schema}.blob_chunks WHERE key = $1 ORDER BY seq`,
        [k],
      );
      await c.query('COMMIT');
      const buf = Buffer.concat(r.rows.map((x) => x.data));
      const actual = sha256(buf);
      if (actual !== m.rows[0].sha256) throw new BlobCorruptError(k, m.rows[0].sha256, actual);
      return buf;
    } catch (e) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw e;
    } finally {
      c.release();
    }
  }

  async stat(refOrKey: string): Promise<BlobInfo | null> {
    const k = blobKey(refOrKey);
    await this.init();
    const r = await this.pool.query<Row>(`SELECT * FROM ${this.schema}.blobs WHERE key = $1`, [k]);
    return r.rows.length ? info(r.rows[0]) : null;
  }

  async delete(refOrKey: string): Promise<boolean> {
    const k = blobKey(refOrKey);
    await this.init();
    const r = await this.pool.query(`DELETE FROM ${this.schema}.blobs WHERE key = $1`, [k]);
    return (r.rowCount ?? 0) > 0;
  }

  /**
   * Sets the expiry of the blobs under `prefix` that have none, but `exceptKey`: a range scan of the key's byte-order
   * index (`blobs_key_bytes`), so a run's prefix costs the run's rows, never the table's. @returns how many changed.
   */
  async expire(prefix: string, expiresAt: number, exceptKey?: string): Promise<number> {
    await this.init();
    const upper = prefixUpperBound(prefix);
    const range = upper === null ? '' : `key COLLATE "C" >= $1 AND key COLLATE "C" < $4 AND`;
    const r = await this.pool.query(
      `UPDATE ${this.schema}.blobs SET expires_at = $2
       WHERE ${range} starts_with(key, $1) AND expires_at IS NULL AND key IS DISTINCT FROM $3`,
      upper === null ? [prefix, expiresAt, exceptKey ?? null] : [prefix, expiresAt, exceptKey ?? null, upper],
    );
    return r.rowCount ?? 0;
  }

  /**
   * Deletes the blobs whose expiresAt <= `now` (ms), chunks included, {@link PG_SWEEP_BATCH} per statement (the
   * `expires_at` index), yielding to the event loop between them. @returns the deleted keys, sorted.
   */
  async sweep(now: number): Promise<string[]> {
    await this.init();
    const gone: string[] = [];
    for (;;) {
      const r = await this.pool.query<{ key: string }>(
        `DELETE FROM ${this.schema}.blobs WHERE key IN (
           SELECT key FROM ${this.schema}.blobs WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)
         RETURNING key`,
        [now, PG_SWEEP_BATCH],
      );
      gone.push(...r.rows.map((x) => x.key));
      if (r.rows.length < PG_SWEEP_BATCH) break;
      await yieldToLoop();
    }
    return gone.sort();
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}
