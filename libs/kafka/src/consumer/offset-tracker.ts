/**
 * Tracks which messages of one partition's batch have completed and yields the contiguous completed prefix:
 * the only position that may be committed (committing past an unfinished offset could lose it on a crash).
 * Messages are named by their position in the batch (0-based, log order), so marking one is an array store, not a
 * lookup by offset text. Offsets are int64 in Kafka; the committable one is computed as BigInt from the decimal
 * string.
 */
export class OffsetTracker {
  private readonly order: string[];
  /** 1 at the position of each completed message. */
  private readonly done: Uint8Array;
  private cursor = 0;

  /** @param offsets the batch's offsets in log order. */
  constructor(offsets: string[]) {
    this.order = offsets;
    this.done = new Uint8Array(offsets.length);
  }

  /**
   * Marks the message at position `index` of the batch completed.
   * @returns the last offset of the completed prefix when the prefix advanced (commit it + 1), else undefined.
   * @throws RangeError when `index` is not a position of the batch.
   */
  complete(index: number): string | undefined {
    if (!(index >= 0 && index < this.order.length))
      throw new RangeError(`position ${index} is not in a batch of ${this.order.length}`);
    this.done[index] = 1;
    const before = this.cursor;
    while (this.cursor < this.order.length && this.done[this.cursor] === 1) this.cursor++;
    return this.cursor > before ? this.order[this.cursor - 1] : undefined;
  }

  /** The offset to commit (next to read) for the completed prefix, or undefined when nothing completed yet. */
  committable(): string | undefined {
    return this.cursor === 0 ? undefined : (BigInt(this.order[this.cursor - 1]) + 1n).toString();
  }

  get pending(): number {
    return this.order.length - this.cursor;
  }
}
