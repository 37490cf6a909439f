import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FsBlobStore, payloadBlobKey, runBlobPrefix } from '../../src';
import { FS_EXPIRY_BUCKET_MS } from '../../src/fs-store';

// The functions fs-store calls, spied on where it looks them up (its compiled module reads them off this object).
// eslint-disable-next-line @typescript-eslint/no-require-imports
const fsp = require('node:fs/promises') as typeof import('node:fs/promises');

jest.setTimeout(120_000);

/** Runs `f` and counts the meta files it reads and the directory entries it lists. */
async function cost<T>(
  f: () => Promise<T>,
): Promise<{ result: T; filesRead: number; entriesListed: number }> {
  const readFile = jest.spyOn(fsp, 'readFile');
  const readdir = jest.spyOn(fsp, 'readdir');
  try {
    const result = await f();
    let entriesListed = 0;
    for (const r of readdir.mock.results) entriesListed += ((await r.value) as unknown[]).length;
    return { result, filesRead: readFile.mock.calls.length, entriesListed };
  } finally {
    readFile.mockRestore();
    readdir.mockRestore();
  }
}

/**
 * What a retention sweep or a claim-checked snapshot costs must be what the run owns, never the size of the store:
 * the orchestrator does it for each run it forgets and each large snapshot it writes (docs/contracts.md "Claim check").
 */
describe('the fs blob store: expiring a run and sweeping cost what is due, not the size of the store', () => {
  const UNRELATED = 20_000;
  let dir: string;
  let store: FsBlobStore;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'keyflow-fs-cost-'));
    store = new FsBlobStore(dir);
    for (let i = 0; i < UNRELATED; i += 500)
      await Promise.all(
        Array.from({ length: 500 }, (_, j) =>
          store.put(payloadBlobKey('state', `other-${i + j}`, '1'), 'x', {
            // Two expiry buckets ahead: a test that crosses an hour boundary between these puts and the sweep
            // (CI at 22:59-23:00, 2026-12-05) must not find them in the bucket due now, which a sweep reads.
            expiresAt: j % 2 ? null : Date.now() + 2 * FS_EXPIRY_BUCKET_MS,
          }),
        ),
      );
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('expire(prefix) of one run among 20,000 unrelated blobs reads none of theirs', async () => {
    for (const seq of ['1', '2', '3']) await store.put(payloadBlobKey('state', 'mine', seq), seq);
    const { result, filesRead, entriesListed } = await cost(() =>
      store.expire(runBlobPrefix('state', 'mine'), 42, payloadBlobKey('state', 'mine', '3')),
    );
    expect(result).toBe(2);
    expect(filesRead).toBeLessThanOrEqual(10);
    expect(entriesListed).toBeLessThanOrEqual(10);
    expect((await store.stat(payloadBlobKey('state', 'mine', '1')))!.expiresAt).toBe(42);
    expect((await store.stat(payloadBlobKey('state', 'mine', '3')))!.expiresAt).toBeNull();
  });

  it('sweep(now) with 20,000 blobs none of which is due reads none of them, and deletes exactly the due ones', async () => {
    await store.put('due/a', 'a', { expiresAt: Date.now() - 1 });
    await store.put('due/b', 'b', { expiresAt: Date.now() - 1 });
    const { result, filesRead, entriesListed } = await cost(() => store.sweep(Date.now()));
    expect(result.filter((k) => k.startsWith('due/')).sort()).toEqual(['due/a', 'due/b']);
    expect(filesRead).toBeLessThanOrEqual(10);
    expect(entriesListed).toBeLessThanOrEqual(10);
    expect(await store.stat('due/a')).toBeNull();
  });
});
