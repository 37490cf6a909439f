import { mkdirSync, mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FsBlobStore, sha256 } from '../../src';

/** Writes a blob as a store of an earlier version did: bytes and `.meta/<key>.json`, no index. */
function writeLegacy(dir: string, key: string, text: string, expiresAt: number | null): void {
  const bytes = Buffer.from(text);
  for (const p of [join(dir, key), join(dir, '.meta', `${key}.json`)])
    mkdirSync(join(p, '..'), { recursive: true });
  writeFileSync(join(dir, key), bytes);
  writeFileSync(
    join(dir, '.meta', `${key}.json`),
    JSON.stringify({ key, sizeBytes: bytes.length, sha256: sha256(bytes), createdAt: 0, expiresAt }),
  );
}

describe('an fs blob store written by an earlier version (no index)', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'keyflow-fs-legacy-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('still reads its blobs, expires a run’s blobs by prefix, and sweeps its due blobs once indexed', async () => {
    writeLegacy(dir, 'state/x_1/1', 'one', null);
    writeLegacy(dir, 'state/x_1/2', 'two', null);
    writeLegacy(dir, 'results/r/a', 'due', 5);
    writeLegacy(dir, 'results/r/b', 'later', Date.now() + 3_600_000);
    const store = new FsBlobStore(dir);
    expect((await store.get('blob:state/x_1/1')).toString()).toBe('one');
    expect(await store.expire('state/x_1/', 42, 'state/x_1/2')).toBe(1);
    expect((await store.stat('state/x_1/1'))!.expiresAt).toBe(42);
    expect((await store.stat('state/x_1/2'))!.expiresAt).toBeNull();
    expect((await store.sweep(Date.now())).sort()).toEqual(['results/r/a', 'state/x_1/1']);
    expect(existsSync(join(dir, '.indexed-v1'))).toBe(true);
    expect((await store.get('results/r/b')).toString()).toBe('later');
    // Indexed now: the kept snapshot is in the index of blobs without an expiry.
    expect(await new FsBlobStore(dir).expire('state/x_1/', 43)).toBe(1);
  });
});
