import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
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

/**
 * Blob store in one local directory: `<root>/<key>` holds the bytes, `<root>/.meta/<key>.json` the BlobInfo.
 * Writes are atomic (temp file + rename). Only processes on this host see it: use {@link PgBlobStore} when the
 * steps of a run may execute on several hosts.
 */
export class FsBlobStore implements BlobStore {
  readonly root: string;
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

  private async atomicWrite(p: string, data: Buffer | string): Promise<void> {
    await mkdir(dirname(p), { recursive: true });
    const tmp = `${p}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
    await writeFile(tmp, data);
    await rename(tmp, p);
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
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new BlobNotFoundError(k);
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
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  async delete(refOrKey: string): Promise<boolean> {
    const k = blobKey(refOrKey);
    const existed = (await this.stat(k)) !== null;
    await rm(this.data(k), { force: true });
    await rm(this.meta(k), { force: true });
    return existed;
  }

  private async *infos(): AsyncGenerator<BlobInfo> {
    const base = join(this.root, META_DIR);
    let entries: string[];
    try {
      entries = (await readdir(base, { recursive: true })) as string[];
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw e;
    }
    for (const e of entries) {
      if (!e.endsWith('.json')) continue;
      const info = await this.stat(relative(base, join(base, e)).slice(0, -'.json'.length)).catch(() => null);
      if (info) yield info;
    }
  }

  async expire(prefix: string, expiresAt: number, exceptKey?: string): Promise<number> {
    let n = 0;
    for await (const info of this.infos()) {
      if (!info.key.startsWith(prefix) || info.key === exceptKey || info.expiresAt !== null) continue;
      await this.atomicWrite(this.meta(info.key), JSON.stringify({ ...info, expiresAt }));
      n++;
    }
    return n;
  }

  async sweep(now: number): Promise<string[]> {
    const gone: string[] = [];
    for await (const info of this.infos())
      if (info.expiresAt !== null && info.expiresAt <= now) {
        await this.delete(info.key);
        gone.push(info.key);
      }
    return gone;
  }

  async close(): Promise<void> {}
}
