import { REJECT_REASONS, type EnrichedCity, type RejectReason } from './types';

/** Counters for a chunk, or for a whole run once merged. All counts are numbers of records. */
export interface EtlStats {
  /** Chunks these stats cover. */
  readonly chunks: number;
  /** Records read from the input. */
  readonly read: number;
  /** Records rejected by validate/enrich. */
  readonly rejected: number;
  /** Rejections per reason; every reason of `REJECT_REASONS` is present (0 when none). */
  readonly rejectsByReason: Readonly<Record<RejectReason, number>>;
  /** Valid records dropped as duplicates (same natural key as an earlier record of the run). */
  readonly duplicates: number;
  /** Valid, unique records (read = rejected + duplicates + accepted). */
  readonly accepted: number;
  /** Rows the sink upserted (inserted or updated to the same or new content). */
  readonly loaded: number;
  /** Accepted records per country code, keys sorted. */
  readonly byCountry: Readonly<Record<string, number>>;
  /** Accepted records per world region ("Unknown" when the country has none), keys sorted. */
  readonly byRegion: Readonly<Record<string, number>>;
}

/** Stats with every count 0 (the identity of `mergeStats`). */
export function emptyStats(): EtlStats {
  return {
    chunks: 0,
    read: 0,
    rejected: 0,
    rejectsByReason: zeroReasons(),
    duplicates: 0,
    accepted: 0,
    loaded: 0,
    byCountry: {},
    byRegion: {},
  };
}

function zeroReasons(): Record<RejectReason, number> {
  return Object.fromEntries(REJECT_REASONS.map((r) => [r, 0])) as Record<RejectReason, number>;
}

/** Region label used in reports for a record. */
export function regionLabel(region: string): string {
  return region === '' ? 'Unknown' : region;
}

function sortedCounts(counts: Map<string, number>): Record<string, number> {
  return Object.fromEntries([...counts.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

function addCounts(...maps: Readonly<Record<string, number>>[]): Record<string, number> {
  const total = new Map<string, number>();
  for (const m of maps) for (const [k, v] of Object.entries(m)) total.set(k, (total.get(k) ?? 0) + v);
  return sortedCounts(total);
}

/**
 * Stats of one processed chunk: `read` records in, the rejection reasons, the number of duplicates, the
 * accepted records (counted per country and region) and the rows the sink `loaded` (0 before loading).
 */
export function chunkStats(input: {
  readonly read: number;
  readonly rejects: readonly { readonly reason: RejectReason }[];
  readonly duplicates: number;
  readonly accepted: readonly Pick<EnrichedCity, 'country' | 'region'>[];
  readonly loaded?: number;
}): EtlStats {
  const rejectsByReason = zeroReasons();
  for (const r of input.rejects) rejectsByReason[r.reason] += 1;
  const byCountry = new Map<string, number>();
  const byRegion = new Map<string, number>();
  for (const city of input.accepted) {
    byCountry.set(city.country, (byCountry.get(city.country) ?? 0) + 1);
    const region = regionLabel(city.region);
    byRegion.set(region, (byRegion.get(region) ?? 0) + 1);
  }
  return {
    chunks: 1,
    read: input.read,
    rejected: input.rejects.length,
    rejectsByReason,
    duplicates: input.duplicates,
    accepted: input.accepted.length,
    loaded: input.loaded ?? 0,
    byCountry: sortedCounts(byCountry),
    byRegion: sortedCounts(byRegion),
  };
}

/** `stats` with `loaded` set to the number of rows the sink upserted for that chunk. */
export function withLoaded(stats: EtlStats, loaded: number): EtlStats {
  return { ...stats, loaded };
}

/** Sum of two stats, field by field (associative and commutative; `emptyStats()` is the identity). */
export function mergeStats(a: EtlStats, b: EtlStats): EtlStats {
  const rejectsByReason = zeroReasons();
  for (const r of REJECT_REASONS)
    rejectsByReason[r] = (a.rejectsByReason[r] ?? 0) + (b.rejectsByReason[r] ?? 0); // stats stored before a reason existed lack it
  return {
    chunks: a.chunks + b.chunks,
    read: a.read + b.read,
    rejected: a.rejected + b.rejected,
    rejectsByReason,
    duplicates: a.duplicates + b.duplicates,
    accepted: a.accepted + b.accepted,
    loaded: a.loaded + b.loaded,
    byCountry: addCounts(a.byCountry, b.byCountry),
    byRegion: addCounts(a.byRegion, b.byRegion),
  };
}

/** What a sink reports about its table at the end of a run. */
export interface SinkSummary {
  readonly rows: number;
  readonly checksum: string;
  readonly byCountry: Readonly<Record<string, number>>;
  readonly byRegion: Readonly<Record<string, number>>;
}

/** The final report of a run. */
export interface EtlReport extends EtlStats {
  /** True when read = rejected + duplicates + accepted and loaded = accepted (nothing lost or double-counted). */
  readonly balanced: boolean;
  /** The `n` countries with most accepted records, most first (ties by code). */
  readonly topCountries: readonly { readonly country: string; readonly count: number }[];
  /** The sink's own view, when given. */
  readonly sink?: SinkSummary;
}

/**
 * Merges per-chunk stats (in any order) into the final report, with an optional sink summary and the `top`
 * (default 10) countries by accepted records.
 */
export function buildReport(
  chunks: readonly EtlStats[],
  options: { sink?: SinkSummary; top?: number } = {},
): EtlReport {
  const total = chunks.reduce(mergeStats, emptyStats());
  const topCountries = Object.entries(total.byCountry)
    .map(([country, count]) => ({ country, count }))
    .sort((x, y) => y.count - x.count || (x.country < y.country ? -1 : 1))
    .slice(0, options.top ?? 10);
  return {
    ...total,
    balanced:
      total.read === total.rejected + total.duplicates + total.accepted && total.loaded === total.accepted,
    topCountries,
    ...(options.sink ? { sink: options.sink } : {}),
  };
}
