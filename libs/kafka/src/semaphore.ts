/** A counting semaphore: bounds in-flight work; waiters are served in FIFO order. */
export class Semaphore {
  private waiters: Array<() => void> = [];
  constructor(private available: number) {}

  /** Number of holders allowed right now minus those holding. */
  get free(): number {
    return this.available;
  }

  get waiting(): number {
    return this.waiters.length;
  }

  /** Takes a slot if one is free now (never while others wait: free slots go to waiters first). */
  tryAcquire(): boolean {
    if (this.available <= 0) return false;
    this.available--;
    return true;
  }

  /**
   * Takes a slot, waiting in line when none is free. With `signal`: an abort while waiting leaves the line without a
   * slot and rejects with the signal's reason; a signal already aborted is refused at once (even with a slot free).
   */
  async acquire(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    if (this.available > 0) {
      this.available--;
      return;
    }
    await new Promise<void>((resolve, reject) => {
      const granted = () => {
        signal?.removeEventListener('abort', aborted);
        resolve();
      };
      const aborted = () => {
        const i = this.waiters.indexOf(granted);
        if (i >= 0) this.waiters.splice(i, 1);
        reject(signal!.reason);
      };
      this.waiters.push(granted);
      signal?.addEventListener('abort', aborted, { once: true });
    });
  }

  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.available++;
  }
}
