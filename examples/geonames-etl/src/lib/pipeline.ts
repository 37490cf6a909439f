import { dedupeChunk, type SeenKeys } from './dedupe';
import type { ReferenceData } from './reference';
import { chunkStats, type EtlStats } from './report';
import { transformRecord } from './transforms';
import type { EnrichedCity, RejectReason } from './types';

/** A rejected input record. */
export interface RejectedRecord {
  /** 0-based position of the record in the input stream (chunk offset + index in chunk). */
  readonly position: number;
  readonly reason: RejectReason;
  readonly detail: string;
}

/** Output of `processChunk`. */
export interface ProcessedChunk {
  /** Valid, enriched, first-seen records, in input order: what a sink should upsert. */
  readonly accepted: EnrichedCity[];
  /** `naturalKey` of each accepted record, at the same index. */
  readonly acceptedKeys: string[];
  readonly rejects: RejectedRecord[];
  /** Valid records dropped because their natural key was already seen (in this chunk or via `seen`). */
  readonly duplicates: EnrichedCity[];
  /** Stats of this chunk (`loaded` 0: set it with `withLoaded` after the sink write). */
  readonly stats: EtlStats;
}

/**
 * Runs validate → normalize → enrich → dedupe over one chunk of raw records. `offset` is the stream position
 * of the chunk's first record (for reject positions); `seen` carries natural keys across chunks (a fresh set
 * when omitted). Pure apart from adding the accepted keys to `seen`.
 */
export function processChunk(
  records: readonly unknown[],
  ref: ReferenceData,
  options: { offset?: number; seen?: SeenKeys } = {},
): ProcessedChunk {
  const offset = options.offset ?? 0;
  const valid: EnrichedCity[] = [];
  const rejects: RejectedRecord[] = [];
  records.forEach((raw, i) => {
    const result = transformRecord(raw, ref);
    if (result.ok) valid.push(result.value);
    else rejects.push({ position: offset + i, reason: result.reason, detail: result.detail });
  });
  const { unique, uniqueKeys, duplicates } = dedupeChunk(valid, options.seen);
  return {
    accepted: unique,
    acceptedKeys: uniqueKeys,
    rejects,
    duplicates,
    stats: chunkStats({ read: records.length, rejects, duplicates: duplicates.length, accepted: unique }),
  };
}
