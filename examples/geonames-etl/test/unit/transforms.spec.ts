import {
  createReferenceData,
  enrich,
  loadReferenceData,
  normalize,
  parseCoordinate,
  transformRecord,
  validate,
  type CityRecord,
  type RejectReason,
} from '../../src/lib';

const ref = loadReferenceData();
const base = { name: 'Paris', lat: '48.85341', lng: '2.3488', country: 'FR', admin1: '11', admin2: '75' };

describe('parseCoordinate', () => {
  it.each([
    ['42.5', 42.5],
    [' -8.55 ', -8.55],
    ['+1e1', 10],
    ['.5', 0.5],
    [12, 12],
  ] as const)('parses %p', (input, expected) => {
    expect(parseCoordinate(input)).toBe(expected);
  });

  it.each([undefined, null, '', '   '])('treats %p as absent', (input) => {
    expect(parseCoordinate(input)).toBeUndefined();
  });

  it.each(['0x10', '12abc', '1,5', 'Infinity', true, {}, Infinity, NaN])(
    'does not read %p as a number',
    (input) => {
      expect(parseCoordinate(input)).toBeNaN();
    },
  );
});

describe('validate', () => {
  const cases: [string, unknown, RejectReason][] = [
    ['null', null, 'NOT_AN_OBJECT'],
    ['an array', [base], 'NOT_AN_OBJECT'],
    ['a string', 'Paris', 'NOT_AN_OBJECT'],
    ['no name', { ...base, name: undefined }, 'MISSING_NAME'],
    ['a blank name', { ...base, name: '   ' }, 'MISSING_NAME'],
    ['a numeric name', { ...base, name: 42 }, 'MISSING_NAME'],
    ['no country', { ...base, country: '' }, 'MISSING_COUNTRY'],
    ['a null country', { ...base, country: null }, 'MISSING_COUNTRY'],
    ['no latitude', { ...base, lat: undefined }, 'MISSING_LATITUDE'],
    ['a blank latitude', { ...base, lat: ' ' }, 'MISSING_LATITUDE'],
    ['latitude 90.00001', { ...base, lat: '90.00001' }, 'BAD_LATITUDE'],
    ['latitude -91', { ...base, lat: -91 }, 'BAD_LATITUDE'],
    ['latitude "north"', { ...base, lat: 'north' }, 'BAD_LATITUDE'],
    ['no longitude', { ...base, lng: null }, 'MISSING_LONGITUDE'],
    ['longitude 180.5', { ...base, lng: '180.5' }, 'BAD_LONGITUDE'],
    ['longitude 1e3', { ...base, lng: '1e3' }, 'BAD_LONGITUDE'],
    ['longitude 0x10', { ...base, lng: '0x10' }, 'BAD_LONGITUDE'],
    ['country XX', { ...base, country: 'XX' }, 'UNKNOWN_COUNTRY'],
    ['country FRA (alpha-3)', { ...base, country: 'FRA' }, 'UNKNOWN_COUNTRY'],
  ];

  it.each(cases)('rejects %s', (_label, raw, reason) => {
    const result = validate(raw, ref);
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.reason).toBe(reason);
      expect(result.detail.length).toBeGreaterThan(0);
    }
  });

  it('reports the first failing check (name before coordinates before country)', () => {
    expect(validate({ name: '', lat: '999', country: 'XX' }, ref)).toMatchObject({ reason: 'MISSING_NAME' });
    expect(validate({ name: 'a', lat: '999', lng: '999', country: 'XX' }, ref)).toMatchObject({
      reason: 'BAD_LATITUDE',
    });
  });

  it.each([
    ['-90', '-180'],
    ['90', '180'],
    [0, 0],
  ])('accepts the boundary point (%p, %p)', (lat, lng) => {
    expect(validate({ ...base, lat, lng }, ref).ok).toBe(true);
  });

  it('accepts a lower-case, padded country code and missing admin codes', () => {
    const result = validate({ name: 'Lyon', lat: '45.75', lng: '4.85', country: ' fr ' }, ref);
    expect(result).toEqual({
      ok: true,
      value: { name: 'Lyon', lat: '45.75', lng: '4.85', country: ' fr ', admin1: '', admin2: '' },
    });
  });
});

describe('normalize', () => {
  it('puts names in NFC, trims, upper-cases the country and parses and rounds coordinates', () => {
    const city = normalize({
      name: '  Zu\u0308rich ',
      lat: ' 47.366670 ',
      lng: 8.550000000001,
      country: ' ch',
      admin1: ' ZH ',
      admin2: '112',
    });
    expect(city).toEqual({
      name: 'Z\u00fcrich',
      lat: 47.36667,
      lng: 8.55,
      country: 'CH',
      admin1: 'ZH',
      admin2: '112',
    });
    expect(city.name).toHaveLength(6);
    expect(city.name).not.toBe('Zu\u0308rich'.trim());
  });

  it('turns -0 into 0 and rounds to 1e-5 degrees', () => {
    const city = normalize({ ...base, lat: '-0.000001', lng: '-12.345678' });
    expect(Object.is(city.lat, 0)).toBe(true);
    expect(city.lng).toBe(-12.34568);
  });
});

describe('enrich (real reference data)', () => {
  const city = (over: Partial<CityRecord>): CityRecord => normalize({ ...base, ...over });

  it('joins country, region, currencies and both admin levels', () => {
    expect(enrich(city({}), ref)).toEqual({
      ok: true,
      value: {
        ...city({}),
        countryName: 'France',
        region: 'Europe',
        subregion: 'Western Europe',
        currencies: ['EUR'],
        admin1Name: 'Île-de-France',
        admin2Name: 'Paris',
      },
    });
  });

  it('looks admin2 up under its admin1 (CH.ZH.112) and returns NFC names', () => {
    const result = enrich(city({ name: 'Zürich', country: 'CH', admin1: 'ZH', admin2: '112' }), ref);
    expect(result.ok && [result.value.admin1Name, result.value.admin2Name]).toEqual([
      'Zurich',
      'Bezirk Zürich',
    ]);
    expect(result.ok && result.value.admin2Name === result.value.admin2Name?.normalize('NFC')).toBe(true);
  });

  it('leaves admin names null for empty or unknown codes, which is not a rejection', () => {
    const andorra = enrich(city({ country: 'AD', admin1: '07', admin2: '' }), ref);
    expect(andorra.ok && [andorra.value.admin1Name, andorra.value.admin2Name]).toEqual([
      'Andorra la Vella',
      null,
    ]);
    const unknown = enrich(city({ admin1: '99', admin2: '999' }), ref);
    expect(unknown.ok && [unknown.value.admin1Name, unknown.value.admin2Name]).toEqual([null, null]);
  });

  it('lists several currencies sorted and none for Antarctica', () => {
    const panama = enrich(city({ country: 'PA', admin1: '', admin2: '' }), ref);
    expect(panama.ok && panama.value.currencies).toEqual(['PAB', 'USD']);
    const aq = enrich(city({ country: 'AQ', admin1: '', admin2: '' }), ref);
    expect(aq.ok && [aq.value.currencies, aq.value.region, aq.value.subregion]).toEqual([
      [],
      'Antarctic',
      '',
    ]);
  });

  it('rejects UNKNOWN_COUNTRY when the reference data lacks the country', () => {
    const empty = createReferenceData({ countries: [], admin1: [], admin2: [] });
    expect(enrich(city({}), empty)).toMatchObject({ ok: false, reason: 'UNKNOWN_COUNTRY' });
  });

  it('loads the full tables of the packages', () => {
    expect(ref.sizes.countries).toBe(250);
    expect(ref.sizes.admin1).toBeGreaterThan(3500);
    expect(ref.sizes.admin2).toBeGreaterThan(40000);
    expect(loadReferenceData()).toBe(ref);
  });
});

describe('transformRecord', () => {
  it('chains validate, normalize and enrich', () => {
    const result = transformRecord({ ...base, name: '  Paris ', country: 'fr' }, ref);
    expect(result).toMatchObject({
      ok: true,
      value: { name: 'Paris', country: 'FR', countryName: 'France' },
    });
    expect(transformRecord({ ...base, lat: '100' }, ref)).toMatchObject({
      ok: false,
      reason: 'BAD_LATITUDE',
    });
  });
});
