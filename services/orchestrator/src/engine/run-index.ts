import { OrderedMap } from '@js-sdsl/ordered-map';

/**
 * Most index entries one page request looks at, filtered out or not: a filter that matches few runs (a rare status)
 * returns a short or empty page with a `next` cursor to go on from, so a request costs at most this many comparisons
 * on the engine's event loop, however many runs the read model holds.
 */
export const RUN_LIST_SCAN_MAX = 10_000;

/** An index key: newest start first, then run id (ascending) among runs started in the same ms. */
interface Key {
  at: number;
  id: string;
}
const newestFirst = (a: Key, b: Key): number => b.at - a.at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** The cursor of the entry a page ended on: `<startedAt>:<runId>` (what GET /runs returns as `next`). */
const cursorOf = (k: Key) => `${k.at}:${k.id}`;
/** The key a cursor names. @throws RangeError when it is not one ({@link RUN_CURSOR}) */
function keyOf(cursor: string): Key {
  const m = RUN_CURSOR.exec(cursor);
  if (!m) throw new RangeError(`not a run list cursor: ${cursor}`);
  return { at: Number(m[1]), id: m[2] };
}
/** The form of a run list cursor: `<startedAt ms>:<runId>`. */
export const RUN_CURSOR = /^(-?\d+(?:\.\d+)?):(.+)$/s;

/**
 * Runs ordered by start time (ms), newest first, kept up to date one change at a time (a red-black tree: O(log n) per
 * change), so a page of a listing costs its own size (plus, with a filter, at most {@link RUN_LIST_SCAN_MAX} entries)
 * instead of a copy and sort of every run.
 */
export class RunIndex<T> {
  /** The tree's values are boxes, so a run's new value with the same start time is set without a search. */
  private readonly tree = new OrderedMap<Key, { value: T }>([], newestFirst);
  private readonly entries = new Map<string, { at: number; box: { value: T } }>();

  get size(): number {
    return this.entries.size;
  }

  /**
   * Adds or replaces a run; `startedAt` in ms (a non-finite one counts as 0). O(1) when its start time is unchanged.
   */
  set(runId: string, startedAt: number, value: T): void {
    const at = Number.isFinite(startedAt) ? startedAt : 0;
    const prev = this.entries.get(runId);
    if (prev !== undefined && prev.at === at) {
      prev.box.value = value;
      return;
    }
    if (prev !== undefined) this.tree.eraseElementByKey({ at: prev.at, id: runId });
    const box = { value };
    this.tree.setElement({ at, id: runId }, box);
    this.entries.set(runId, { at, box });
  }

  delete(runId: string): void {
    const prev = this.entries.get(runId);
    if (prev === undefined) return;
    this.tree.eraseElementByKey({ at: prev.at, id: runId });
    this.entries.delete(runId);
  }

  /**
   * Up to `limit` runs that `match`, newest first, started at or after `from` and before `to` (ms), after `cursor` (the
   * `next` of the previous page). `next` is set when there may be more: after a full page, or after
   * {@link RUN_LIST_SCAN_MAX} entries looked at (the page may then be short, even empty).
   * @throws RangeError when `cursor` is not one ({@link RUN_CURSOR})
   */
  page(
    q: { limit: number; cursor?: string; from?: number; to?: number },
    match: (value: T) => boolean,
  ): { items: T[]; next?: string } {
    const end = this.tree.end();
    // Where to start: after the cursor, or at the first run started at or before `to` (those at `to` are passed).
    const after = q.cursor === undefined ? undefined : keyOf(q.cursor);
    const upTo = q.to === undefined ? undefined : { at: q.to, id: '' };
    const it =
      after && (!upTo || newestFirst(after, upTo) >= 0)
        ? this.tree.upperBound(after)
        : upTo
          ? this.tree.lowerBound(upTo)
          : this.tree.begin();
    const items: T[] = [];
    let looked = 0;
    for (; !it.equals(end); it.next()) {
      const [key, { value }] = it.pointer;
      if (q.from !== undefined && key.at < q.from) return { items };
      if (q.to !== undefined && key.at >= q.to) continue;
      if (looked === RUN_LIST_SCAN_MAX) {
        it.pre();
        return { items, next: cursorOf(it.pointer[0]) };
      }
      looked++;
      if (!match(value)) continue;
      items.push(value);
      if (items.length === q.limit) {
        const last = key;
        it.next();
        const more = !it.equals(end) && (q.from === undefined || it.pointer[0].at >= q.from);
        return { items, next: more ? cursorOf(last) : undefined };
      }
    }
    return { items };
  }
}

/**
 * A Map of runs that keeps a {@link RunIndex} of its values as they are set and deleted (`of` says each value's start
 * time and the indexed item), so the code that fills it stays a Map's.
 */
export class StartIndexedMap<V, T> extends Map<string, V> {
  readonly index = new RunIndex<T>();

  constructor(private readonly of: (value: V) => { startedAt: number; item: T }) {
    super();
  }

  override set(key: string, value: V): this {
    super.set(key, value);
    const { startedAt, item } = this.of(value);
    this.index.set(key, startedAt, item);
    return this;
  }

  override delete(key: string): boolean {
    this.index.delete(key);
    return super.delete(key);
  }

  override clear(): void {
    for (const key of this.keys()) this.index.delete(key);
    super.clear();
  }
}
