/** A group of consecutive records. */
export interface Chunk<T> {
  /** 0-based position of the chunk in the stream. */
  readonly index: number;
  /** 0-based position in the stream of the chunk's first record (index × size for all but a short last chunk). */
  readonly offset: number;
  /** 1 to `size` records, in stream order. */
  readonly records: T[];
}

/** Default number of records per chunk. */
export const DEFAULT_CHUNK_SIZE = 1000;

/**
 * Groups `source` into chunks of `size` records (default 1000); the last chunk may be shorter, and an empty
 * source yields no chunk. Holds at most one chunk in memory. `size` must be a positive integer.
 */
export async function* chunkRecords<T>(
  source: AsyncIterable<T> | Iterable<T>,
  size: number = DEFAULT_CHUNK_SIZE,
): AsyncGenerator<Chunk<T>> {
  if (!Number.isInteger(size) || size < 1)
    throw new RangeError(`chunk size must be a positive integer, got ${size}`);
  let index = 0;
  let offset = 0;
  let records: T[] = [];
  for await (const record of source) {
    records.push(record);
    if (records.length === size) {
      yield { index, offset, records };
      index += 1;
      offset += size;
      records = [];
    }
  }
  if (records.length > 0) yield { index, offset, records };
}
