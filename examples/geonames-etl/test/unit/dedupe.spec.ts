import { dedupeChunk, dedupeKey, naturalKey, normalize, type CityRecord } from '../../src/lib';

const city = (over: Partial<Record<keyof CityRecord, string>> = {}): CityRecord =>
  normalize({
    name: 'Paris',
    lat: '48.85341',
    lng: '2.3488',
    country: 'FR',
    admin1: '11',
    admin2: '75',
    ...over,
  });

describe('naturalKey', () => {
  it('is the same for the same place written differently', () => {
    const a = city();
    expect(naturalKey(city({ name: ' Paris', lat: '48.853410', lng: '+2.34880', country: 'fr' }))).toBe(
      naturalKey(a),
    );
    expect(naturalKey(city({ admin2: '' }))).toBe(naturalKey(a));
    expect(naturalKey(city({ name: 'Zu\u0308rich' }))).toBe(naturalKey(city({ name: 'Z\u00fcrich' })));
    expect(dedupeKey).toBe(naturalKey);
  });

  it.each([
    ['name', { name: 'paris' }],
    ['country', { country: 'CA' }],
    ['admin1', { admin1: '12' }],
    ['latitude by 1e-5', { lat: '48.85342' }],
    ['longitude by 1e-5', { lng: '2.34881' }],
  ])('differs when the %s differs', (_label, over) => {
    expect(naturalKey(city(over))).not.toBe(naturalKey(city()));
  });

  it('cannot be made ambiguous by separators inside names', () => {
    const a = naturalKey(city({ name: 'a","11' }));
    const b = naturalKey(city({ name: 'a', admin1: '11","11' }));
    expect(a).not.toBe(b);
    expect(JSON.parse(naturalKey(city()))).toEqual(['FR', '11', 'Paris', '48.85341', '2.34880']);
  });
});

describe('dedupeChunk', () => {
  it('keeps the first occurrence within a chunk, in order', () => {
    const [a, b, a2, c] = [
      city(),
      city({ country: 'CA' }),
      city({ lat: '48.853410' }),
      city({ name: 'Lyon' }),
    ];
    const { unique, duplicates } = dedupeChunk([a, b, a2, c]);
    expect(unique).toEqual([a, b, c]);
    expect(duplicates).toEqual([a2]);
    expect(duplicates[0]).toBe(a2);
  });

  it('drops records seen by earlier chunks through a shared set, and records the new keys', () => {
    const seen = new Set<string>();
    const first = dedupeChunk([city(), city({ name: 'Lyon' })], seen);
    expect(first.unique).toHaveLength(2);
    expect(seen.size).toBe(2);
    const second = dedupeChunk([city({ name: 'Lyon' }), city({ name: 'Nice' })], seen);
    expect(second.unique.map((c) => c.name)).toEqual(['Nice']);
    expect(second.duplicates.map((c) => c.name)).toEqual(['Lyon']);
    expect(seen.size).toBe(3);
  });

  it('works with any has/add store', () => {
    const calls: string[] = [];
    const store = {
      keys: new Set<string>([naturalKey(city())]),
      has(key: string) {
        calls.push('has');
        return this.keys.has(key);
      },
      add(key: string) {
        calls.push('add');
        this.keys.add(key);
      },
    };
    const { unique, duplicates } = dedupeChunk([city(), city({ name: 'Lyon' })], store);
    expect([unique.length, duplicates.length]).toEqual([1, 1]);
    expect(calls).toEqual(['has', 'has', 'add']);
  });
});
