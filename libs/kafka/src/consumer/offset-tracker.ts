/**
 * Tracks which offsets of one partition's batch have completed and yields the contiguous completed prefix:
 * the only position that may be committed (committing past an unfinished offset could lose it on a crash).
 * Offsets are int64 in Kafka; they are compared as BigInt from their decimal strings.
 */
export class OffsetTracker {
  private readonly order: string[];
  private readonly done = new Set<string>();
  private cursor = 0;

  /** @param offsets the batch's offsets in log order. */
  constructor(offsets: string[]) {
    this.order = offsets;
  }

  /**
   * Marks `offset` completed. @returns the last offset of the completed prefix when the prefix advanced
   * (commit it + 1), else undefined.
   */
  complete(offset: string): string | undefined {
    this.done.add(offset);
    const before = this.cursor;
    while (this.cursor < this.order.length && this.done.has(this.order[this.cursor])) this.cursor++;
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
