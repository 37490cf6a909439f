import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  BlobNotFoundError,
  ClaimCheck,
  FsBlobStore,
  InvalidBlobKeyError,
  PayloadTooLargeError,
  loadBlobConfig,
  BlobConfigError,
} from '../../src';

describe('the claim check', () => {
  const dir = mkdtempSync(join(tmpdir(), 'claim-unit-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const store = new FsBlobStore(dir);
  const opts = { maxMessageBytes: 1000, maxBlobBytes: 5000, graceMs: 0 };

  it('keeps a payload under half the topic limit inline', async () => {
    const cc = new ClaimCheck(store, opts);
    await expect(cc.offload('x', 'k/small', 'a'.repeat(500), 1000)).resolves.toEqual({
      inline: 'a'.repeat(500),
      ref: null,
    });
  });

  it('moves a larger payload to the store and resolves it back byte for byte (multi-byte UTF-8 counted in bytes)', async () => {
    const cc = new ClaimCheck(store, opts);
    const text = 'é'.repeat(300); // 600 bytes, 300 characters
    const c = await cc.offload('x', 'k/big', text, 1000);
    expect(c).toEqual({ inline: '', ref: 'blob:k/big' });
    await expect(cc.resolve(c.inline, c.ref)).resolves.toBe(text);
    const info = await store.stat('blob:k/big');
    expect(info).toMatchObject({ sizeBytes: 600 });
    expect(info!.expiresAt).toBeGreaterThanOrEqual(info!.createdAt + 1000);
  });

  it('fails a payload it cannot carry with PAYLOAD_TOO_LARGE, not retryable', async () => {
    const none = new ClaimCheck(null, opts);
    const e1 = await none.offload('output of r/s', 'k/x', 'a'.repeat(600), 1000).catch((e) => e);
    expect(e1).toBeInstanceOf(PayloadTooLargeError);
    expect(e1).toMatchObject({ code: 'PAYLOAD_TOO_LARGE', retryable: false });
    const e2 = await new ClaimCheck(store, opts).offload('y', 'k/y', 'a'.repeat(6000), 1000).catch((e) => e);
    expect(e2).toMatchObject({ code: 'PAYLOAD_TOO_LARGE', retryable: false });
    expect(String(e2.message)).toMatch(/KEYFLOW_BLOB_MAX_BYTES/);
  });

  it('a swept blob is reported by name, and keys cannot escape the store', async () => {
    await expect(store.get('blob:k/none')).rejects.toBeInstanceOf(BlobNotFoundError);
    await expect(store.put('../etc/passwd', 'x')).rejects.toBeInstanceOf(InvalidBlobKeyError);
  });

  it('the postgres store needs a URL', () => {
    expect(() => loadBlobConfig({ KEYFLOW_BLOB_STORE: 'postgres' })).toThrow(BlobConfigError);
    expect(loadBlobConfig({}).KEYFLOW_MAX_MESSAGE_BYTES).toBe(1_048_588);
  });
});
