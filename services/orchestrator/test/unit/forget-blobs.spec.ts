import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FsBlobStore, payloadBlobKey } from '@keyflow/blobs';
import { forgottenRunBlobPrefixes } from '../../src/engine/mapping';

describe("forgetting a run expires its own blobs, never another run's", () => {
  let dir: string;
  let store: FsBlobStore;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'keyflow-forget-'));
    store = new FsBlobStore(dir);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const forget = async (runId: string, legacyShared: boolean) => {
    for (const prefix of forgottenRunBlobPrefixes(runId, legacyShared)) await store.expire(prefix, 42);
  };

  it("x:1 forgotten leaves x_1's live snapshot blob without an expiry (their keys used to be the same)", async () => {
    await store.put(payloadBlobKey('state', 'x:1', '4'), 'a');
    await store.put(payloadBlobKey('state', 'x_1', '4'), 'b');
    await forget('x:1', false);
    expect((await store.stat(payloadBlobKey('state', 'x:1', '4')))!.expiresAt).toBe(42);
    expect((await store.stat(payloadBlobKey('state', 'x_1', '4')))!.expiresAt).toBeNull();
  });

  it('a blob written under the old encoding still reads, and expires with its run unless another run known shares its old prefix', async () => {
    const old = 'state/x_1/0123456789abcdef0123456789abcdef'; // x:1's snapshot, written by an earlier version
    await store.put(old, 'old');
    expect((await store.get(`blob:${old}`)).toString()).toBe('old');
    await forget('x:1', true); // x_1 is still known: its own old blobs may be there
    expect((await store.stat(old))!.expiresAt).toBeNull();
    await forget('x:1', false);
    expect((await store.stat(old))!.expiresAt).toBe(42);
  });

  it('run and run-2 do not share a prefix', async () => {
    await store.put(payloadBlobKey('state', 'run-2', '1'), 'b');
    await forget('run', false);
    expect((await store.stat(payloadBlobKey('state', 'run-2', '1')))!.expiresAt).toBeNull();
  });
});
