import { dlqRetention, dlqTopicConfigs } from '../../src';

/**
 * A DLQ keeps no record longer than the workers keep the completion records and fences of its commands (issue 39,
 * fault 4): `segment.ms + retention.ms` stays under WORKER_COMPLETION_TTL_MS less a margin, so a redriven command of a
 * compensated step still finds its fence.
 */
describe('DLQ retention derived from the completion TTL', () => {
  const DAY = 86_400_000;

  it.each([7 * DAY, DAY, 3_600_000, 60_000, 1_000])(
    'for a TTL of %d ms, records go before the fences',
    (ttl) => {
      const { retentionMs, segmentMs } = dlqRetention(ttl);
      expect(retentionMs).toBeGreaterThan(0);
      expect(segmentMs).toBeGreaterThan(0);
      expect(retentionMs + segmentMs).toBeLessThan(ttl);
    },
  );

  it('the default TTL (7 days) keeps DLQ records about 6 days, in segments of a day, an hour before the fences', () => {
    expect(dlqRetention(7 * DAY)).toEqual({ retentionMs: 6 * DAY - 3_600_000, segmentMs: DAY });
  });

  it('DLQ topics are created with them, and the default TTL when none is given', () => {
    expect(dlqTopicConfigs(1_000_000, 60_000)).toEqual({
      'max.message.bytes': String(2 * 1_000_000 + 16 * 1024),
      'retention.ms': String(dlqRetention(60_000).retentionMs),
      'segment.ms': String(dlqRetention(60_000).segmentMs),
    });
    expect(dlqTopicConfigs(1_000_000)['retention.ms']).toBe(String(6 * DAY - 3_600_000));
  });
});
