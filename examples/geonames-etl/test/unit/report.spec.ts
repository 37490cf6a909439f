import fc from 'fast-check';
import {
  REJECT_REASONS,
  buildReport,
  chunkRecords,
  chunkStats,
  emptyStats,
  loadReferenceData,
  mergeStats,
  processChunk,
  naturalKey,
  readRecords,
  withLoaded,
  type EtlStats,
  type RejectReason,
} from '../../src/lib';
import { FIXTURE_RECORDS, collect, fixture } from './fixtures';

const ref = loadReferenceData();

describe('processChunk on the fixture records', () => {
  it('accepts, rejects with reasons and positions, and drops the duplicate', () => {
    const out = processChunk(FIXTURE_RECORDS, ref, { offset: 100 });
    expect(out.accepted.map((c) => `${c.country}:${c.name}`)).toEqual([
      'AD:Andorra la Vella',
      'CH:Zürich',
      'FR:Paris',
      'CA:Paris',
      'JP:Tokyo',
      'CH:Rüti / Dorfzentrum, Südl. Teil',
    ]);
    expect(out.rejects.map((r) => [r.position, r.reason])).toEqual([
      [105, 'MISSING_NAME'],
      [106, 'BAD_LATITUDE'],
      [107, 'UNKNOWN_COUNTRY'],
      [108, 'BAD_LONGITUDE'],
    ]);
    expect(out.duplicates.map((c) => c.name)).toEqual(['Andorra la Vella']);
    expect(out.acceptedKeys).toEqual(out.accepted.map(naturalKey));
    expect(out.stats).toMatchObject({
      chunks: 1,
      read: 11,
      rejected: 4,
      duplicates: 1,
      accepted: 6,
      loaded: 0,
      byCountry: { AD: 1, CA: 1, CH: 2, FR: 1, JP: 1 },
      byRegion: { Americas: 1, Asia: 1, Europe: 4 },
    });
    expect(out.stats.rejectsByReason).toMatchObject({ MISSING_NAME: 1, BAD_LATITUDE: 1, UNKNOWN_COUNTRY: 1 });
    expect(out.stats.rejectsByReason.NOT_AN_OBJECT).toBe(0);
  });

  it.each(['cities.json', 'cities.jsonl', 'cities.csv'])(
    'gives the same report from %s read in chunks of 3 with a shared seen set as in one chunk',
    async (name) => {
      const seen = new Set<string>();
      const stats: EtlStats[] = [];
      for await (const chunk of chunkRecords(readRecords(fixture(name)), 3)) {
        const out = processChunk(chunk.records, ref, { offset: chunk.offset, seen });
        stats.push(withLoaded(out.stats, out.accepted.length));
      }
      const whole = processChunk(await collect(readRecords(fixture(name))), ref);
      const report = buildReport(stats);
      expect(stats).toHaveLength(4);
      expect(report).toMatchObject({ ...whole.stats, chunks: 4, loaded: 6, balanced: true });
      expect(report.topCountries[0]).toEqual({ country: 'CH', count: 2 });
    },
  );
});

describe('stats merge', () => {
  const reasons = fc.constantFrom(...REJECT_REASONS);
  const countries = fc.constantFrom('FR', 'CH', 'JP', 'CA');
  const regions = fc.constantFrom('Europe', 'Asia', '');
  const arbStats: fc.Arbitrary<EtlStats> = fc
    .record({
      rejects: fc.array(reasons, { maxLength: 5 }),
      accepted: fc.array(fc.record({ country: countries, region: regions }), { maxLength: 8 }),
      duplicates: fc.nat(5),
      loaded: fc.nat(8),
    })
    .map((s) => ({
      ...chunkStats({
        read: s.rejects.length + s.accepted.length + s.duplicates,
        rejects: s.rejects.map((reason: RejectReason) => ({ reason })),
        duplicates: s.duplicates,
        accepted: s.accepted,
      }),
      loaded: s.loaded,
    }));

  it('is associative and commutative with emptyStats as identity', () => {
    fc.assert(
      fc.property(arbStats, arbStats, arbStats, (a, b, c) => {
        expect(mergeStats(mergeStats(a, b), c)).toEqual(mergeStats(a, mergeStats(b, c)));
        expect(mergeStats(a, b)).toEqual(mergeStats(b, a));
        expect(mergeStats(a, emptyStats())).toEqual(a);
      }),
    );
  });

  it('adds every counter', () => {
    const a = chunkStats({
      read: 4,
      rejects: [{ reason: 'BAD_LATITUDE' }],
      duplicates: 1,
      accepted: [
        { country: 'FR', region: 'Europe' },
        { country: 'AQ', region: '' },
      ],
      loaded: 2,
    });
    const b = chunkStats({
      read: 3,
      rejects: [{ reason: 'BAD_LATITUDE' }, { reason: 'MISSING_NAME' }],
      duplicates: 0,
      accepted: [{ country: 'FR', region: 'Europe' }],
      loaded: 1,
    });
    const report = buildReport([a, b], { top: 1 });
    expect(report).toMatchObject({
      chunks: 2,
      read: 7,
      rejected: 3,
      duplicates: 1,
      accepted: 3,
      loaded: 3,
      byCountry: { AQ: 1, FR: 2 },
      byRegion: { Europe: 2, Unknown: 1 },
      balanced: true,
      topCountries: [{ country: 'FR', count: 2 }],
    });
    expect(report.rejectsByReason).toMatchObject({ BAD_LATITUDE: 2, MISSING_NAME: 1, MISSING_COUNTRY: 0 });
    expect(Object.keys(report.rejectsByReason)).toEqual([...REJECT_REASONS]);
    expect(report.sink).toBeUndefined();
  });

  it('flags a report whose counts do not add up', () => {
    const lossy = withLoaded(
      chunkStats({ read: 5, rejects: [], duplicates: 0, accepted: [{ country: 'FR', region: 'Europe' }] }),
      1,
    );
    expect(buildReport([lossy]).balanced).toBe(false);
    const unloaded = chunkStats({
      read: 1,
      rejects: [],
      duplicates: 0,
      accepted: [{ country: 'FR', region: 'Europe' }],
    });
    expect(buildReport([unloaded]).balanced).toBe(false);
    expect(buildReport([]).balanced).toBe(true);
  });

  it('orders top countries by count, then code, and carries the sink summary', () => {
    const s = chunkStats({
      read: 4,
      rejects: [],
      duplicates: 0,
      accepted: ['JP', 'FR', 'JP', 'CH'].map((country) => ({ country, region: 'x' })),
      loaded: 4,
    });
    const sink = { rows: 4, checksum: 'abc', byCountry: { JP: 2 }, byRegion: { x: 4 } };
    const report = buildReport([s], { sink });
    expect(report.topCountries).toEqual([
      { country: 'JP', count: 2 },
      { country: 'CH', count: 1 },
      { country: 'FR', count: 1 },
    ]);
    expect(report.sink).toBe(sink);
  });
});
