import { createHash, type Hash } from 'node:crypto';
import { naturalKey } from '../dedupe';
import { regionLabel } from '../report';
import type { EnrichedCity } from '../types';

/** Column names of a sink table, in checksum order (the first is the primary key). */
export const COLUMNS = [
  'natural_key',
  'name',
  'country',
  'admin1',
  'admin2',
  'lat',
  'lng',
  'country_name',
  'region',
  'subregion',
  'currencies',
  'admin1_name',
  'admin2_name',
] as const;

/** One table row as values in `COLUMNS` order; `currencies` is the codes joined with ",". */
export type SinkRow = [
  naturalKey: string,
  name: string,
  country: string,
  admin1: string,
  admin2: string,
  lat: number,
  lng: number,
  countryName: string,
  region: string,
  subregion: string,
  currencies: string,
  admin1Name: string | null,
  admin2Name: string | null,
];

/** The table row of a city. */
export function toRow(city: EnrichedCity): SinkRow {
  return [
    naturalKey(city),
    city.name,
    city.country,
    city.admin1,
    city.admin2,
    city.lat,
    city.lng,
    city.countryName,
    city.region,
    city.subregion,
    city.currencies.join(','),
    city.admin1Name,
    city.admin2Name,
  ];
}

/** Rows of `cities` with one row per natural key (the last record wins), in first-seen key order. */
export function uniqueRows(cities: readonly EnrichedCity[]): SinkRow[] {
  const byKey = new Map<string, SinkRow>();
  for (const city of cities) {
    const row = toRow(city);
    byKey.set(row[0], row);
  }
  return [...byKey.values()];
}

/** Incremental table checksum: feed rows in natural-key byte order, then `digest()`. */
export class TableHasher {
  private readonly hash: Hash = createHash('sha256');
  add(row: readonly unknown[]): void {
    this.hash.update(JSON.stringify(row));
    this.hash.update('\n');
  }
  digest(): string {
    return this.hash.digest('hex');
  }
}

/** Plain SQL identifier (letters, digits, underscore; not starting with a digit; at most 63 characters). */
export function checkIdentifier(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name))
    throw new Error(`invalid table name ${JSON.stringify(name)}`);
  return name;
}

/** Folds `[key, count]` pairs into a key-sorted record, labelling regions with `regionLabel` when asked. */
export function countsRecord(
  rows: Iterable<readonly [string, number]>,
  regions = false,
): Record<string, number> {
  const out = new Map<string, number>();
  for (const [k, n] of rows) {
    const key = regions ? regionLabel(k) : k;
    out.set(key, (out.get(key) ?? 0) + n);
  }
  return Object.fromEntries([...out.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}
