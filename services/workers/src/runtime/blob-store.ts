import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';

/**
 * Claim-check store for bulk data: messages carry a reference (`blob:<key>`), the bytes live here. Local directory
 * by default (KEYFLOW_BLOB_DIR, default `.keyflow/blobs` under the working directory); every worker of a deployment
 * must see the same directory (or, in production, the same S3-compatible bucket behind this interface).
 * Writes are atomic (temp file + rename), so a re-executed task overwrites a blob with the same bytes safely.
 */
export class BlobStore {
  readonly root: string;
  constructor(root = process.env.KEYFLOW_BLOB_DIR ?? '.keyflow/blobs') {
    this.root = resolve(root);
  }

  private path(ref: string): string {
    const key = ref.startsWith('blob:') ? ref.slice(5) : ref;
    if (!/^[A-Za-z0-9_./-]+$/.test(key) || key.split('/').includes('..'))
      throw new Error(`invalid blob key ${JSON.stringify(key)}`);
    return join(this.root, key);
  }

  /** Stores `data` under `key`. @returns the reference to put in a message (`blob:<key>`). */
  async put(key: string, data: string | Buffer): Promise<string> {
    const p = this.path(key);
    await mkdir(dirname(p), { recursive: true });
    const tmp = `${p}.${process.pid}.tmp`;
    await writeFile(tmp, data);
    await rename(tmp, p);
    return `blob:${key}`;
  }

  /** @throws Error (ENOENT) when the blob does not exist. */
  async get(ref: string): Promise<Buffer> {
    return readFile(this.path(ref));
  }

  async putJson(key: string, value: unknown): Promise<string> {
    return this.put(key, JSON.stringify(value));
  }

  async getJson<T>(ref: string): Promise<T> {
    return JSON.parse((await this.get(ref)).toString('utf8')) as T;
  }

  /** JSON Lines: one record per line. */
  async putLines(key: string, records: readonly unknown[]): Promise<string> {
    return this.put(key, records.map((r) => JSON.stringify(r)).join('\n') + (records.length ? '\n' : ''));
  }

  async getLines<T>(ref: string): Promise<T[]> {
    const text = (await this.get(ref)).toString('utf8');
    return text
      .split('\n')
      .filter((l) => l.length > 0)
      .map((l) => JSON.parse(l) as T);
  }
}
