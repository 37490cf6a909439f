import type { BlobStore } from './store';

export interface SweeperOptions {
  /** Time from the end of one sweep to the start of the next, in ms (default 10 minutes). */
  intervalMs?: number;
  /** Called with the keys deleted by each sweep, or the error of a failed one (the next sweep tries again). */
  onSweep?: (deleted: string[], err?: unknown) => void;
  now?: () => number;
}

/**
 * Deletes expired blobs (see retention.ts for when a blob expires): a sweep starts `intervalMs` after the previous
 * one ended, so sweeps never overlap however long one takes (the stores' sweeps list only what is due and yield
 * between batches). Several processes may sweep the same store: a delete is idempotent. @returns stop(), which
 * cancels the next sweep and waits for one in progress.
 */
export function startBlobSweeper(store: BlobStore, o: SweeperOptions = {}): () => Promise<void> {
  let running: Promise<void> = Promise.resolve();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(tick, o.intervalMs ?? 10 * 60_000);
    timer.unref();
  };
  const tick = () => {
    running = store
      .sweep((o.now ?? Date.now)())
      .then(
        (keys) => o.onSweep?.(keys),
        (err) => o.onSweep?.([], err),
      )
      .finally(schedule);
  };
  schedule();
  return async () => {
    stopped = true;
    clearTimeout(timer);
    await running;
  };
}
