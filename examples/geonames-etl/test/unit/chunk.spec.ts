import { DEFAULT_CHUNK_SIZE, chunkRecords } from '../../src/lib';
import { collect } from './fixtures';

async function* numbers(n: number): AsyncGenerator<number> {
  for (let i = 0; i < n; i += 1) yield i;
}

describe('chunkRecords', () => {
  it('groups a stream into chunks of the default 1000 with index and offset, keeping order', async () => {
    const chunks = await collect(chunkRecords(numbers(2500)));
    expect(DEFAULT_CHUNK_SIZE).toBe(1000);
    expect(chunks.map((c) => [c.index, c.offset, c.records.length])).toEqual([
      [0, 0, 1000],
      [1, 1000, 1000],
      [2, 2000, 500],
    ]);
    expect(chunks.flatMap((c) => c.records)).toEqual(Array.from({ length: 2500 }, (_, i) => i));
    expect(chunks[2].records[0]).toBe(2000);
  });

  it('takes a synchronous iterable and an explicit size; an exact multiple leaves no empty chunk', async () => {
    const chunks = await collect(chunkRecords(['a', 'b', 'c', 'd'], 2));
    expect(chunks).toEqual([
      { index: 0, offset: 0, records: ['a', 'b'] },
      { index: 1, offset: 2, records: ['c', 'd'] },
    ]);
  });

  it('yields nothing for an empty source', async () => {
    expect(await collect(chunkRecords([], 3))).toEqual([]);
  });

  it.each([0, -1, 1.5, NaN])('refuses size %p', async (size) => {
    await expect(collect(chunkRecords([1], size))).rejects.toThrow(RangeError);
  });

  it('pulls from the source lazily, one chunk ahead at most', async () => {
    let pulled = 0;
    async function* counting(): AsyncGenerator<number> {
      for (let i = 0; i < 100; i += 1) {
        pulled += 1;
        yield i;
      }
    }
    const it = chunkRecords(counting(), 10);
    const first = await it.next();
    expect(first.value?.records).toHaveLength(10);
    expect(pulled).toBe(10);
    await it.return(undefined);
  });
});
