import { loadEtlSettings } from '../../src/settings';

const base = {};

describe('where the ETL handlers may read and write (ETL_INPUT_ROOTS, ETL_SQLITE_ROOTS, ETL_POSTGRES_URLS)', () => {
  it('by default: no input directory (only the bundled input), SQLite under .keyflow (npm start), no PostgreSQL', () => {
    const c = loadEtlSettings(base);
    expect([c.ETL_INPUT_ROOTS, c.ETL_SQLITE_ROOTS, c.ETL_POSTGRES_URLS]).toEqual([[], ['.keyflow'], []]);
  });

  it('comma-separated lists, blanks dropped', () => {
    const c = loadEtlSettings({
      ...base,
      ETL_INPUT_ROOTS: '/data/in, /srv/geo ,',
      ETL_POSTGRES_URLS: 'postgres://etl@db:5432/geo',
    });
    expect([c.ETL_INPUT_ROOTS, c.ETL_POSTGRES_URLS]).toEqual([
      ['/data/in', '/srv/geo'],
      ['postgres://etl@db:5432/geo'],
    ]);
  });
});
