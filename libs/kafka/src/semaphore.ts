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

  async acquire(): Promise<void> {
    if (this.available > 0) {
      this.available--;
      return;
    }
    await new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  release(): void {
    const next = this.waiters.shift();
    if (next) next();
    else this.available++;
  }
}
