import type { BlobStore } from './store';

export interface SweeperOptions {
  /** Time between sweeps, in ms (default 10 minutes). */
  intervalMs?: number;
  /** Called with the keys deleted by each sweep, or the error of a failed one (the next sweep tries again). */
  onSweep?: (deleted: string[], err?: unknown) => void;
  now?: () => number;
}

/**
 * Deletes expired blobs every `intervalMs` (see retention.ts for when a blob expires). Several processes may sweep
 * the same store: a delete is idempotent. @returns stop(), which waits for a sweep in progress.
 */
export function startBlobSweeper(store: BlobStore, o: SweeperOptions = {}): () => Promise<void> {
  let running: Promise<void> = Promise.resolve();
  const tick = () => {
    running = store.sweep((o.now ?? Date.now)()).then(
      (keys) => o.onSweep?.(keys),
      (err) => o.onSweep?.([], err),
    );
  };
  const timer = setInterval(tick, o.intervalMs ?? 10 * 60_000);
  timer.unref();
  return async () => {
    clearInterval(timer);
    await running;
  };
}
