import { access, mkdir, opendir, readdir, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { BlobCorruptError, BlobNotFoundError } from './errors';
import {
  BLOB_REF_PREFIX,
  blobKey,
  sha256,
  toBuffer,
  type BlobInfo,
  type BlobStore,
  type PutOptions,
} from './store';

const META_DIR = '.meta';
/** Index of the blobs without an expiry: an empty file `.live/<key>` each (what expire by prefix lists). */
const LIVE_DIR = '.live';
/** Index of the blobs with an expiry: an empty file `.expiry/<hour>/<key>` each, hour = floor(expiresAt / 1 h). */
const EXPIRY_DIR = '.expiry';
/** Written once the indexes cover every blob (a new store, or an older one after {@link FsBlobStore.reindex}). */
const INDEXED_MARK = '.indexed-v1';
/** Width of an expiry bucket, ms: a sweep lists the buckets that are due, not the blobs that are not. */
export const FS_EXPIRY_BUCKET_MS = 3_600_000;
/** Blobs a sweep or a reindex handles between two yields to the event loop. */
export const FS_SWEEP_BATCH = 500;

const isMissing = (e: unknown) => (e as NodeJS.ErrnoException).code === 'ENOENT';

/**
 * Blob store in one local directory: `<root>/<key>` holds the bytes, `<root>/.meta/<key>.json` the BlobInfo, and two
 * indexes of empty marker files make expiry cost what is due rather than the size of the store: `.live/<key>` for a
 * blob without an expiry (expire by prefix lists the prefix's directory there: a run's blobs, not the store's) and
 * `.expiry/<hour>/<key>` for one with an expiry (a sweep lists the due hours only). Markers are hints, the meta file
 * is the truth: a marker is written before its meta changes, so a crash leaves a stale marker (dropped when read),
 * never a blob missing from an index. A store written by an earlier version (no `.indexed-v1`) is indexed in the
 * background when first used ({@link reindex}: one pass over its metas, in yielding batches); until that ends, expire
 * also lists the prefix's directory under `.meta` (the run's blobs) and a sweep waits for it. Writes are atomic (temp file + rename). Only processes on this host see it: use
 * {@link PgBlobStore} when the steps of a run may execute on several hosts.
 */
export class FsBlobStore implements BlobStore {
  readonly root: string;
  private indexed?: Promise<boolean>;
  private reindexing?: Promise<void>;
  constructor(root: string) {
    this.root = resolve(root);
  }

  get describe(): string {
    return `fs:${this.root}`;
  }

  private data(key: string): string {
    return join(this.root, key);
  }
  private meta(key: string): string {
    return join(this.root, META_DIR, `${key}.json`);
  }
  private live(key: string): string {
    return join(this.root, LIVE_DIR, key);
  }
  private expiryMark(key: string, expiresAt: number): string {
    return join(this.root, EXPIRY_DIR, String(Math.floor(expiresAt / FS_EXPIRY_BUCKET_MS)), key);
  }

  /** Whether every blob is in the indexes: true for a store this version created, or once reindexed. */
  private isIndexed(): Promise<boolean> {
    this.indexed ??= (async () => {
      if (await exists(join(this.root, INDEXED_MARK))) return true;
      if (await exists(join(this.root, META_DIR))) {
        // Written by an earlier version: indexed in the background, once (one pass, yielding between batches).
        this.reindexing ??= this.reindex().catch(() => {
          this.reindexing = undefined; // the next sweep tries again
        });
        return false;
      }
      await mkdir(this.root, { recursive: true });
      await writeFile(join(this.root, INDEXED_MARK), '');
      return true;
    })();
    return this.indexed;
  }

  private async atomicWrite(p: string, data: Buffer | string): Promise<void> {
    const tmp = `${p}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
    await inDirectory(p, () => writeFile(tmp, data));
    await rename(tmp, p); // the directory holds tmp: no sweep removes it meanwhile
  }

  private async mark(p: string): Promise<void> {
    await inDirectory(p, () => writeFile(p, ''));
  }

  /** The marker of `info`'s expiry (or of its having none), written before its meta says so. */
  private markOf(info: Pick<BlobInfo, 'key' | 'expiresAt'>): string {
    return info.expiresAt === null ? this.live(info.key) : this.expiryMark(info.key, info.expiresAt);
  }

  async put(key: string, data: string | Buffer, opts: PutOptions = {}): Promise<BlobInfo & { ref: string }> {
    const k = blobKey(key);
    const buf = toBuffer(data);
    const info: BlobInfo = {
      key: k,
      sizeBytes: buf.length,
      sha256: sha256(buf),
      createdAt: opts.createdAt ?? Date.now(),
      expiresAt: opts.expiresAt ?? null,
    };
    await this.isIndexed();
    await this.mark(this.markOf(info));
    await this.atomicWrite(this.data(k), buf);
    await this.atomicWrite(this.meta(k), JSON.stringify(info));
    return { ...info, ref: `${BLOB_REF_PREFIX}${k}` };
  }

  async get(refOrKey: string): Promise<Buffer> {
    const k = blobKey(refOrKey);
    let buf: Buffer;
    try {
      buf = await readFile(this.data(k));
    } catch (e) {
      if (isMissing(e)) throw new BlobNotFoundError(k);
      throw e;
    }
    const info = await this.stat(k);
    if (info) {
      const actual = sha256(buf);
      if (actual !== info.sha256) throw new BlobCorruptError(k, info.sha256, actual);
    }
    return buf;
  }

  async stat(refOrKey: string): Promise<BlobInfo | null> {
    const k = blobKey(refOrKey);
    try {
      return JSON.parse(await readFile(this.meta(k), 'utf8')) as BlobInfo;
    } catch (e) {
      if (isMissing(e)) return null;
      throw e;
    }
  }

  async delete(refOrKey: string): Promise<boolean> {
    const k = blobKey(refOrKey);
    const info = await this.stat(k);
    await rm(this.data(k), { force: true });
    await rm(this.meta(k), { force: true });
    await rm(this.live(k), { force: true });
    if (info?.expiresAt != null) await rm(this.expiryMark(k, info.expiresAt), { force: true });
    // The run's directories once its last blob is gone (never one that still holds something: rmdir refuses).
    await rmdirUp(this.root, k);
    await rmdirUp(join(this.root, META_DIR), `${k}.json`);
    await rmdirUp(join(this.root, LIVE_DIR), k);
    return info !== null;
  }

  /**
   * The keys under `base` (a directory of the store) that start with `prefix`: one listing of the prefix's directory,
   * and the whole of the sub-directories that match. `suffix` is cut from file names (`.json` under `.meta`).
   */
  private async keysUnder(base: string, prefix: string, suffix = ''): Promise<string[]> {
    const dir = prefix.slice(0, prefix.lastIndexOf('/') + 1);
    const name = prefix.slice(dir.length);
    let entries;
    try {
      entries = await readdir(join(base, dir), { withFileTypes: true });
    } catch (e) {
      if (isMissing(e) || (e as NodeJS.ErrnoException).code === 'ENOTDIR') return [];
      throw e;
    }
    const keys: string[] = [];
    for (const e of entries) {
      if (!e.name.startsWith(name)) continue;
      if (e.isDirectory()) {
        const inner = (await readdir(join(base, dir, e.name), {
          recursive: true,
          withFileTypes: true,
        })) as Array<{
          name: string;
          parentPath: string;
          isFile(): boolean;
        }>;
        for (const f of inner)
          if (f.isFile() && f.name.endsWith(suffix) && !f.name.endsWith('.tmp'))
            keys.push(relativeKey(base, join(f.parentPath, f.name), suffix));
      } else if (e.isFile() && e.name.endsWith(suffix) && !e.name.endsWith('.tmp'))
        keys.push(`${dir}${e.name.slice(0, e.name.length - suffix.length)}`);
    }
    return keys;
  }

  /**
   * Sets the expiry of the blobs under `prefix` that have none, but `exceptKey`. Lists `.live/<prefix's directory>`
   * (and, in a store not yet reindexed, `.meta/<prefix's directory>`): a run's prefix costs the run's blobs, never the
   * store's. @returns how many changed. @throws InvalidBlobKeyError for a prefix no key could start with
   */
  async expire(prefix: string, expiresAt: number, exceptKey?: string): Promise<number> {
    if (prefix !== '') blobKey(`${prefix}x`); // the rules of a key (no `..`, no leading `/`): stays in the store
    const candidates = new Set(await this.keysUnder(join(this.root, LIVE_DIR), prefix));
    if (!(await this.isIndexed()))
      for (const k of await this.keysUnder(join(this.root, META_DIR), prefix, '.json')) candidates.add(k);
    let n = 0;
    for (const key of candidates) {
      if (key === exceptKey || !key.startsWith(prefix)) continue;
      const info = await this.stat(key).catch(() => null);
      if (info?.expiresAt === null) {
        await this.mark(this.expiryMark(key, expiresAt));
        await this.atomicWrite(this.meta(key), JSON.stringify({ ...info, expiresAt }));
        n++;
      }
      await rm(this.live(key), { force: true }); // expired now, or a stale marker (gone, or expiring already)
    }
    for (const key of candidates) await rmdirUp(join(this.root, LIVE_DIR), key);
    return n;
  }

  /**
   * Deletes the blobs whose expiresAt <= `now` (ms): lists only the expiry buckets that are due (the current hour's
   * too), reading each blob's meta there; yields to the event loop every {@link FS_SWEEP_BATCH} blobs. A sweep of a
   * store written by an earlier version waits for its {@link reindex} first. @returns the deleted keys.
   */
  async sweep(now: number): Promise<string[]> {
    if (!(await this.isIndexed())) await (this.reindexing ?? this.reindex());
    const base = join(this.root, EXPIRY_DIR);
    let buckets: string[];
    try {
      buckets = await readdir(base);
    } catch (e) {
      if (isMissing(e)) return [];
      throw e;
    }
    const due = Math.floor(now / FS_EXPIRY_BUCKET_MS);
    const gone: string[] = [];
    let handled = 0;
    for (const bucket of buckets.filter((b) => /^\d+$/.test(b) && Number(b) <= due).sort()) {
      const dir = join(base, bucket);
      let left = 0;
      for (const key of await this.keysUnder(dir, '')) {
        if (++handled % FS_SWEEP_BATCH === 0) await yieldToLoop();
        const info = await this.stat(key).catch(() => null);
        if (info?.expiresAt != null && info.expiresAt <= now) {
          await this.delete(key);
          gone.push(key);
        } else if (
          info?.expiresAt != null &&
          Math.floor(info.expiresAt / FS_EXPIRY_BUCKET_MS) === Number(bucket)
        )
          left++; // due later this hour
        else await rm(join(dir, key), { force: true }); // stale: the blob is gone or its expiry changed
        await rmdirUp(dir, key);
      }
      // Only when empty: a marker written meanwhile (an expiry set in the past) must stay.
      if (left === 0) await rmdir(dir).catch(() => undefined);
    }
    return gone;
  }

  /**
   * Builds the indexes of a store written by an earlier version: one pass over `.meta`, streamed, yielding every
   * {@link FS_SWEEP_BATCH} blobs; then marks the store indexed. Idempotent; blobs written meanwhile index themselves.
   */
  async reindex(): Promise<void> {
    const base = join(this.root, META_DIR);
    let handled = 0;
    const walk = async (dir: string): Promise<void> => {
      let d;
      try {
        d = await opendir(dir);
      } catch (e) {
        if (isMissing(e)) return;
        throw e;
      }
      for await (const e of d) {
        const p = join(dir, e.name);
        if (e.isDirectory()) await walk(p);
        else if (e.isFile() && e.name.endsWith('.json')) {
          if (++handled % FS_SWEEP_BATCH === 0) await yieldToLoop();
          const info = await this.stat(relativeKey(base, p, '.json')).catch(() => null);
          if (info) await this.mark(this.markOf(info));
        }
      }
    };
    await walk(base);
    await writeFile(join(this.root, INDEXED_MARK), '');
    this.indexed = Promise.resolve(true);
  }

  async close(): Promise<void> {}
}

/**
 * Runs `write` (of a file at `p`) after creating `p`'s directory; again when the directory vanished meanwhile (a
 * sweep removing a run's directory once its last blob is gone).
 */
async function inDirectory<T>(p: string, write: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    await mkdir(dirname(p), { recursive: true });
    try {
      return await write();
    } catch (e) {
      if (!isMissing(e) || attempt >= 5) throw e;
    }
  }
}

/** Removes the empty directories between `key`'s file and `base` (exclusive), deepest first; stops at one not empty. */
async function rmdirUp(base: string, key: string): Promise<void> {
  const parts = key.split('/').slice(0, -1);
  for (let i = parts.length; i > 0; i--) {
    try {
      await rmdir(join(base, ...parts.slice(0, i)));
    } catch {
      return; // not empty (or already gone)
    }
  }
}

async function exists(p: string): Promise<boolean> {
  return access(p).then(
    () => true,
    () => false,
  );
}

/** The store key of file `p` under `base` (path separators as `/`), `suffix` cut. */
function relativeKey(base: string, p: string, suffix: string): string {
  return p
    .slice(base.length + 1, p.length - suffix.length)
    .split(/[\\/]/)
    .join('/');
}
