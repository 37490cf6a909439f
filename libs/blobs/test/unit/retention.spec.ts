import {
  COMPACTED_SEGMENT_MS,
  TASK_TOPIC_RETENTION_MS,
  WF_EVENTS_RETENTION_MS,
  blobExpiresAt,
  blobRetentionMs,
  supersededExpiry,
} from '../../src';

const DAY = 24 * 3600 * 1000;

describe('blob retention arithmetic', () => {
  it('a blob outlives the records naming it by the grace period', () => {
    expect(blobExpiresAt(1_000, 7 * DAY, DAY)).toBe(1_000 + 8 * DAY);
  });

  it('a payload blob is kept as long as the longest-lived topic that copies it (wf.events, 30 days)', () => {
    expect(blobRetentionMs()).toBe(WF_EVENTS_RETENTION_MS);
    expect(blobRetentionMs()).toBeGreaterThanOrEqual(TASK_TOPIC_RETENTION_MS);
    // A replay of wf.events on its last retained day still finds the blob.
    const created = Date.UTC(2026, 0, 1);
    const lastReplay = created + WF_EVENTS_RETENTION_MS;
    expect(blobExpiresAt(created, blobRetentionMs(), 0)!).toBeGreaterThanOrEqual(lastReplay);
  });

  it('the blob of a compacted record never expires by age, and a superseded one after its segment can be cleaned', () => {
    expect(blobExpiresAt(5, null, DAY)).toBeNull();
    expect(supersededExpiry(10, DAY)).toBe(10 + COMPACTED_SEGMENT_MS + DAY);
  });

  it('refuses negative or non-finite times instead of computing a past expiry', () => {
    expect(() => blobExpiresAt(-1, DAY, 0)).toThrow(RangeError);
    expect(() => blobExpiresAt(0, -DAY, 0)).toThrow(RangeError);
    expect(() => blobExpiresAt(0, Number.POSITIVE_INFINITY, 0)).toThrow(RangeError);
    expect(() => blobExpiresAt(0, DAY, Number.NaN)).toThrow(RangeError);
  });
});
