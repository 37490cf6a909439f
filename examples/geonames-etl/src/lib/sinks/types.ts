import type { SinkSummary } from '../report';
import type { EnrichedCity } from '../types';

/** Result of one `upsert` call. */
export interface UpsertResult {
  /** Distinct natural keys written in the transaction (input rows after dropping repeated keys, last wins). */
  readonly rows: number;
  /** Rows inserted or whose content changed; 0 when the same chunk is upserted again. */
  readonly changed: number;
}

/**
 * A table of enriched cities keyed by natural key (see `naturalKey`). Upserts are idempotent: writing the
 * same records again leaves the table, its row count and its checksum unchanged.
 */
export interface CitySink {
  /** Table name (a plain SQL identifier). */
  readonly table: string;
  /** Creates the table if it is missing (safe to call again). */
  init(): Promise<void>;
  /**
   * Inserts or updates the records by natural key, all in one transaction (all or nothing). `signal`: a wait for
   * the sink (SQLite's writer lock) ends when it aborts, rejecting with its reason and writing nothing.
   */
  upsert(cities: readonly EnrichedCity[], options?: { signal?: AbortSignal }): Promise<UpsertResult>;
  /** Number of rows in the table. */
  count(): Promise<number>;
  /**
   * SHA-256 (lower-case hex) of the table contents: every row's columns, serialized as a JSON array followed by
   * "\n", in natural-key byte order. Equal tables give equal checksums, in SQLite and PostgreSQL alike.
   */
  checksum(): Promise<string>;
  /** Rows per country code and per region label ("Unknown" for ''), keys sorted. */
  countsBy(): Promise<{ byCountry: Record<string, number>; byRegion: Record<string, number> }>;
  /** count, checksum and countsBy together. */
  summary(): Promise<SinkSummary>;
  /** Releases the connection (a PostgreSQL pool passed in by the caller is left open). */
  close(): Promise<void>;
}
