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

describe('the fs blob store indexes', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'keyflow-fs-index-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('expire of a run’s segments prefix reaches the blobs in its sub-directories; a sweep leaves no empty directory', async () => {
    const store = new FsBlobStore(dir);
    await store.put('segments/run/map.0/5', 'a');
    await store.put('segments/run/map.1/6', 'b');
    await store.put('segments/run-2/map.0/1', 'c');
    expect(await store.expire('segments/run/', 10)).toBe(2);
    expect((await store.stat('segments/run-2/map.0/1'))!.expiresAt).toBeNull();
    expect((await store.sweep(11)).sort()).toEqual(['segments/run/map.0/5', 'segments/run/map.1/6']);
    for (const d of ['segments/run', '.meta/segments/run', '.live/segments/run', '.expiry/0'])
      expect(existsSync(join(dir, d))).toBe(false);
    await store.put('segments/run/map.0/7', 'again'); // the run's directories come back as needed
    expect((await store.get('segments/run/map.0/7')).toString()).toBe('again');
  });
});
