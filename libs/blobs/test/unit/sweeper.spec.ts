import { startBlobSweeper, type BlobStore } from '../../src';

describe('the blob sweeper', () => {
  it('never starts a sweep while one runs, however longer than the interval a sweep takes; stop waits for it', async () => {
    let running = 0;
    let most = 0;
    let ended = 0;
    let fifth!: () => void;
    const fiveEnded = new Promise<void>((r) => (fifth = r));
    const store = {
      sweep: async () => {
        most = Math.max(most, ++running);
        await new Promise((r) => setTimeout(r, 30)); // three intervals long
        running--;
        if (++ended === 5) fifth();
        return [];
      },
    } as unknown as BlobStore;
    const stop = startBlobSweeper(store, { intervalMs: 10 });
    await fiveEnded;
    await stop();
    expect(most).toBe(1);
    expect(running).toBe(0);
  });
});
