// Bad input at the file door (issue 11, items 1 and 2): a duplicated or empty CSV column name fails the read with a
// named error; a record with invalid UTF-8 (CSV, JSON Lines, JSON) or a NUL is rejected with its own reason and
// never reaches a sink; a decimal comma is its own reject; padded numbers are trimmed; exponents are numbers.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  buildReport,
  EtlError,
  InputColumnError,
  loadReferenceData,
  processChunk,
  readRecords,
  withLoaded,
  type RawRecord,
} from '../../src/lib';
import { collect, collectUntilError } from './fixtures';

const ref = loadReferenceData();
let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'etl-bad-input-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Writes `parts` (text as UTF-8, numbers as raw bytes) to a file named `name`; its path. */
function file(name: string, ...parts: Array<string | number[]>): string {
  const path = join(dir, name);
  writeFileSync(
    path,
    Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p, 'utf8') : Buffer.from(p)))),
  );
  return path;
}

async function run(path: string) {
  const records: RawRecord[] = await collect(readRecords(path));
  const out = processChunk(records, ref);
  return { records, out, report: buildReport([withLoaded(out.stats, out.accepted.length)]) };
}

const HEADER = 'name,lat,lng,country,admin1,admin2';

describe('CSV column names', () => {
  it('a duplicated column name fails the read naming the column, before any record', async () => {
    const path = file(
      'dup.csv',
      `${HEADER},lat\nZurich,47.36667,8.55,CH,ZH,112,91\nParis,48.85341,2.3488,FR,11,75,12\n`,
    );
    const { items, error } = await collectUntilError(readRecords(path));
    expect(items).toEqual([]);
    expect(error).toBeInstanceOf(InputColumnError);
    expect(error).toBeInstanceOf(EtlError);
    expect(error).toMatchObject({ code: 'DUPLICATE_COLUMN', retryable: false, column: 'lat' });
    expect((error as Error).message).toMatch(/column "lat" appears twice \(columns 2 and 7\)/);
  });

  it('an empty column name fails the read naming its position', async () => {
    const path = file('empty.csv', `name,lat,,lng,country,admin1,admin2\nZurich,47.36667,x,8.55,CH,ZH,112\n`);
    const { items, error } = await collectUntilError(readRecords(path));
    expect(items).toEqual([]);
    expect(error).toMatchObject({ code: 'EMPTY_COLUMN', retryable: false });
    expect((error as Error).message).toMatch(/column 3 has no name/);
  });
});

describe('invalid UTF-8 rejects that record alone, with its byte offset', () => {
  it('in CSV: the row whose name holds 0xFF is INVALID_ENCODING, the others load unchanged', async () => {
    const path = file(
      'bad-utf8.csv',
      `${HEADER}\nParis,48.85341,2.3488,FR,11,75\nZ`,
      [0xff],
      `rich,47.36667,8.55,CH,ZH,112\nTokyo,35.6895,139.69171,JP,40,\n`,
    );
    const { out, report } = await run(path);
    expect(out.accepted.map((c) => c.name)).toEqual(['Paris', 'Tokyo']);
    expect(out.rejects).toEqual([
      { position: 1, reason: 'INVALID_ENCODING', detail: expect.stringMatching(/line 3.*"name".*byte 1/) },
    ]);
    expect(report.rejectsByReason.INVALID_ENCODING).toBe(1);
    expect(report.balanced).toBe(true);
  });

  it('in JSON Lines: the line holding 0xFF is INVALID_ENCODING with its file byte offset', async () => {
    const first = '{"name":"Paris","lat":"48.85341","lng":"2.3488","country":"FR"}\n';
    const path = file(
      'bad-utf8.jsonl',
      first,
      '{"name":"Z',
      [0xff],
      'rich","lat":"47.36667","lng":"8.55","country":"CH"}\n',
    );
    const { out } = await run(path);
    expect(out.accepted.map((c) => c.name)).toEqual(['Paris']);
    const offset = Buffer.byteLength(first) + '{"name":"Z'.length;
    expect(out.rejects).toEqual([
      {
        position: 1,
        reason: 'INVALID_ENCODING',
        detail: expect.stringContaining(`line 2, byte offset ${offset}`),
      },
    ]);
  });

  it('in a JSON array: the element holding 0xFF is INVALID_ENCODING with its file byte offset', async () => {
    const head = '[{"name":"Paris","lat":"48.85341","lng":"2.3488","country":"FR"},\n {"name":"Z';
    const path = file(
      'bad-utf8.json',
      head,
      [0xff],
      'rich","lat":"47.36667","lng":"8.55","country":"CH"},\n {"name":"Tokyo","lat":"35.6895","lng":"139.69171","country":"JP"}]\n',
    );
    const { out } = await run(path);
    expect(out.accepted.map((c) => c.name)).toEqual(['Paris', 'Tokyo']);
    expect(out.rejects).toEqual([
      {
        position: 1,
        reason: 'INVALID_ENCODING',
        detail: expect.stringContaining(`byte offset ${Buffer.byteLength(head)}`),
      },
    ]);
  });

  it('a real U+FFFD written as valid UTF-8 is a character like any other, and loads', async () => {
    const path = file('real-fffd.csv', `${HEADER}\nZ\uFFFDrich,47.36667,8.55,CH,ZH,112\n`);
    const { out } = await run(path);
    expect(out.rejects).toEqual([]);
    expect(out.accepted[0].name).toBe('Z\uFFFDrich');
  });

  it('a lone surrogate escape in JSON is INVALID_ENCODING (it has no UTF-8 form)', async () => {
    const path = file('lone.jsonl', '{"name":"Z\\ud800rich","lat":"1","lng":"1","country":"CH"}\n');
    const { out } = await run(path);
    expect(out.rejects.map((r) => r.reason)).toEqual(['INVALID_ENCODING']);
  });
});

describe('characters and numbers', () => {
  it('a NUL in a field is NUL_CHARACTER, in CSV and in JSON', async () => {
    const csv = await run(file('nul.csv', `${HEADER}\nZu\u0000rich,47.36667,8.55,CH,ZH,112\n`));
    expect(csv.out.rejects.map((r) => r.reason)).toEqual(['NUL_CHARACTER']);
    const json = await run(
      file('nul.jsonl', '{"name":"Zurich","lat":"47.3","lng":"8.5","country":"C\\u0000H"}\n'),
    );
    expect(json.out.rejects.map((r) => r.reason)).toEqual(['NUL_CHARACTER']);
  });

  it('a decimal comma is DECIMAL_COMMA, not a number nor BAD_LATITUDE', async () => {
    const { out, report } = await run(
      file('comma.csv', `${HEADER}\nZurich,"47,36667",8.55,CH,ZH,112\nBern,46.9,"7,45",CH,BE,\n`),
    );
    expect(out.rejects.map((r) => r.reason)).toEqual(['DECIMAL_COMMA', 'DECIMAL_COMMA']);
    expect(report.rejectsByReason.DECIMAL_COMMA).toBe(2);
  });

  it('padded numbers are trimmed and exponent notation is a number', async () => {
    const { out } = await run(
      file('numbers.csv', `${HEADER}\nZurich,  47.36667 ,8.55e0,CH,ZH,112\nBern,4.69E1, 7.45 ,CH,BE,\n`),
    );
    expect(out.rejects).toEqual([]);
    expect(out.accepted.map((c) => [c.lat, c.lng])).toEqual([
      [47.36667, 8.55],
      [46.9, 7.45],
    ]);
  });
});
