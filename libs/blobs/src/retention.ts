/**
 * Retention rule of claim-check blobs (docs/contracts.md "Claim check"): a blob lives at least as long as the longest
 * retention of the topics whose records may name it, plus a grace period, so a consumer replaying any record still
 * in its topic finds the blob. Sources: Kafka topic configs `retention.ms` (broker default log.retention.hours=168)
 * and, for compacted topics, `segment.ms` (a superseded record stays readable at least until its segment rolls and
 * the cleaner runs; https://kafka.apache.org/documentation/#topicconfigs).
 */

const DAY_MS = 24 * 3600 * 1000;

/** Kafka's default `retention.ms` (log.retention.hours=168), used by task.<type> and task.results. */
export const TASK_TOPIC_RETENTION_MS = 7 * DAY_MS;
/** `retention.ms` of wf.events (set by the orchestrator when it creates the topic). */
export const WF_EVENTS_RETENTION_MS = 30 * DAY_MS;
/** Kafka's default `segment.ms`: how long a superseded record of a compacted topic (wf.state) may stay readable. */
export const COMPACTED_SEGMENT_MS = 7 * DAY_MS;
/** Default extra time a blob outlives the records naming it (KEYFLOW_BLOB_GRACE_MS). */
export const DEFAULT_BLOB_GRACE_MS = DAY_MS;

/**
 * Retention in ms of the longest-lived non-compacted topic a blob written for `topic` may be named from:
 * a task result's output is copied into StepCompleted (wf.events) and into the next commands, so every
 * payload blob outlives wf.events.
 */
export function blobRetentionMs(): number {
  return Math.max(TASK_TOPIC_RETENTION_MS, WF_EVENTS_RETENTION_MS);
}

/**
 * When the sweeper may delete a blob written at `createdAt` (ms) for records kept `retentionMs`:
 * `createdAt + retentionMs + graceMs`; null (never by age) when `retentionMs` is null (a compacted topic's latest
 * record: the blob of a run's latest snapshot stays until a newer snapshot supersedes it, see {@link supersededExpiry}).
 * @throws RangeError on a negative or non-finite argument.
 */
export function blobExpiresAt(createdAt: number, retentionMs: number | null, graceMs: number): number | null {
  for (const [n, v] of [
    ['createdAt', createdAt],
    ['graceMs', graceMs],
  ] as const)
    if (!Number.isFinite(v) || v < 0) throw new RangeError(`${n} must be a finite number >= 0, got ${v}`);
  if (retentionMs === null) return null;
  if (!Number.isFinite(retentionMs) || retentionMs < 0)
    throw new RangeError(`retentionMs must be a finite number >= 0 or null, got ${retentionMs}`);
  return createdAt + retentionMs + graceMs;
}

/**
 * Expiry of a compacted topic's blob once a newer record with the same key superseded it at `supersededAt` (ms):
 * the old record may be read until its segment rolls and is cleaned, so `supersededAt + segmentMs + graceMs`.
 */
export function supersededExpiry(
  supersededAt: number,
  graceMs: number,
  segmentMs = COMPACTED_SEGMENT_MS,
): number {
  return blobExpiresAt(supersededAt, segmentMs, graceMs)!;
}
