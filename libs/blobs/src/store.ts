import { createHash } from 'node:crypto';
import { InvalidBlobKeyError } from './errors';

/** Prefix of a claim-check reference in a message: `blob:<key>`. */
export const BLOB_REF_PREFIX = 'blob:';

/** What the store knows of one blob. */
export interface BlobInfo {
  key: string;
  /** Length of the blob in bytes. */
  sizeBytes: number;
  /** SHA-256 of the bytes, lowercase hex. */
  sha256: string;
  /** When it was (last) written, ms since the epoch. */
  createdAt: number;
  /** When the sweeper may delete it, ms since the epoch; null: never by age (see docs/contracts.md "Claim check"). */
  expiresAt: number | null;
}

export interface PutOptions {
  /** ms since the epoch after which the sweeper may delete the blob; null or absent: kept until deleted. */
  expiresAt?: number | null;
  /**
   * ms since the epoch recorded as the blob's creation (default: when the store writes it). Give the instant an
   * `expiresAt` was computed from, so `expiresAt - createdAt` is exactly the retention asked for.
   */
  createdAt?: number;
}

/**
 * Claim-check store: messages carry `blob:<key>`, the bytes live here. Keys are `[A-Za-z0-9_./-]+` without `..`.
 * A put of an existing key replaces it atomically (readers see the old or the new bytes, never a mix), so a
 * re-executed task that rewrites its blob is safe. Implementations: {@link FsBlobStore} (one host's directory) and
 * {@link PgBlobStore} (PostgreSQL, shared by every host).
 */
export interface BlobStore {
  /** Where the bytes live, for logs (`fs:/path`, `postgres:schema`). */
  readonly describe: string;
  /** Stores `data` under `key`. @returns the reference to put in a message (`blob:<key>`) and its info. */
  put(key: string, data: string | Buffer, opts?: PutOptions): Promise<BlobInfo & { ref: string }>;
  /**
   * The bytes under `refOrKey` (`blob:<key>` or `<key>`), checked against their SHA-256.
   * @throws BlobNotFoundError, BlobCorruptError, InvalidBlobKeyError
   */
  get(refOrKey: string): Promise<Buffer>;
  /** @returns null when absent. */
  stat(refOrKey: string): Promise<BlobInfo | null>;
  /** @returns whether a blob was deleted. */
  delete(refOrKey: string): Promise<boolean>;
  /**
   * Sets the expiry of every blob whose key starts with `prefix` and that has none yet, except `exceptKey`
   * (used to let superseded snapshots go). @returns how many changed.
   */
  expire(prefix: string, expiresAt: number, exceptKey?: string): Promise<number>;
  /** Deletes every blob whose expiresAt <= `now` (ms). @returns the deleted keys. */
  sweep(now: number): Promise<string[]>;
  close(): Promise<void>;
}

/** `blob:<key>` or `<key>` -> `<key>`, validated. @throws InvalidBlobKeyError */
export function blobKey(refOrKey: string): string {
  const key = refOrKey.startsWith(BLOB_REF_PREFIX) ? refOrKey.slice(BLOB_REF_PREFIX.length) : refOrKey;
  if (!/^[A-Za-z0-9_./-]+$/.test(key) || key.split('/').includes('..') || key.startsWith('/'))
    throw new InvalidBlobKeyError(key);
  return key;
}

export function isBlobRef(s: unknown): s is string {
  return typeof s === 'string' && s.startsWith(BLOB_REF_PREFIX);
}

export function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

export function toBuffer(data: string | Buffer): Buffer {
  return typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
}

/** JSON and JSON Lines helpers over any store. */
export const blobJson = {
  async put(store: BlobStore, key: string, value: unknown, opts?: PutOptions): Promise<string> {
    return (await store.put(key, JSON.stringify(value), opts)).ref;
  },
  async get<T>(store: BlobStore, ref: string): Promise<T> {
    return JSON.parse((await store.get(ref)).toString('utf8')) as T;
  },
  /** One record per line. */
  async putLines(
    store: BlobStore,
    key: string,
    records: readonly unknown[],
    opts?: PutOptions,
  ): Promise<string> {
    return blobJson.putLineTexts(
      store,
      key,
      records.map((r) => JSON.stringify(r)),
      opts,
    );
  },
  async getLines<T>(store: BlobStore, ref: string): Promise<T[]> {
    return blobJson.lines(await store.get(ref)).map((l) => JSON.parse(l) as T);
  },
  /**
   * The lines of JSON Lines bytes (a blob's, from `store.get`) as text, not parsed, empty lines left out: to keep
   * some records as they were written, byte for byte, without stringifying them again (`putLineTexts`).
   */
  lines(bytes: Buffer): string[] {
    return bytes
      .toString('utf8')
      .split('\n')
      .filter((l) => l.length > 0);
  },
  /** Writes lines split by `lines` (each one JSON text without a newline) as a JSON Lines blob. */
  async putLineTexts(
    store: BlobStore,
    key: string,
    lines: readonly string[],
    opts?: PutOptions,
  ): Promise<string> {
    return (await store.put(key, lines.join('\n') + (lines.length ? '\n' : ''), opts)).ref;
  },
};

/** Longest {@link blobKeySegment} kept as written; a longer one is cut and suffixed with a SHA-256 (see there). */
const SEGMENT_MAX_CHARS = 180;
const SEGMENT_CUT_CHARS = 120;

/**
 * `text` as one path segment of a blob key, injectively (two different texts never give the same segment):
 * ASCII letters, digits, `-` and `.` (but a leading one) as they are; every other character as the UTF-8 bytes
 * escaped `_XX` (two uppercase hex digits: `_` itself is `_5F`, `:` is `_3A`), a lone UTF-16 surrogate as `_uXXXX`;
 * the empty text as `_`. An encoding longer than 180 characters (a file name must stay under 255 bytes) is cut to its
 * first 120 and followed by `_h` and the SHA-256 hex of `text` (186 characters: never the length of a short one).
 * The characters are those of {@link blobKey}, without `/`, so the segment never holds a path separator nor is `..`.
 */
export function blobKeySegment(text: string): string {
  if (text === '') return '_';
  let out = '';
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    if (/^[A-Za-z0-9-]$/.test(ch) || (ch === '.' && out !== '')) out += ch;
    else if (cp >= 0xd800 && cp <= 0xdfff) out += `_u${cp.toString(16).toUpperCase()}`;
    else for (const b of Buffer.from(ch, 'utf8')) out += `_${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  if (out.length <= SEGMENT_MAX_CHARS) return out;
  return `${out.slice(0, SEGMENT_CUT_CHARS)}_h${createHash('sha256').update(text, 'utf8').digest('hex')}`;
}

/**
 * The prefix of every payload blob key of run `runId` of `kind`: `<kind>/<blobKeySegment(runId)>/`. Ends with the
 * separator, so it is never a prefix of another run's keys (`state/run/` is not one of `state/run-2/...`).
 */
export function runBlobPrefix(kind: string, runId: string): string {
  return `${blobKeySegment(kind)}/${blobKeySegment(runId)}/`;
}

/**
 * A blob key for a payload of `kind` in run `runId` named by `name` (e.g. an idempotency key, which may contain
 * `[`, `]`, `#`): `<kind>/<blobKeySegment(runId)>/<sha256(name) first 32 hex>`. Deterministic, so a replayed result
 * rewrites the same blob; injective in the run id, so forgetting one run never touches another's blobs.
 */
export function payloadBlobKey(kind: string, runId: string, name: string): string {
  return `${runBlobPrefix(kind, runId)}${createHash('sha256').update(name).digest('hex').slice(0, 32)}`;
}

/**
 * The run part of keys written before {@link blobKeySegment} (keyflow <= 0.1.0 stores): every character outside
 * `[A-Za-z0-9_.-]` and leading dots as `_`. Not injective (`x:1` and `x_1`, `.x` and `_x` share it): use it only to
 * find the blobs of a run no other known run shares it with ({@link legacyRunBlobPrefix}). Blobs written so are read
 * by the reference their record carries, as any other.
 */
export function legacyRunSegment(runId: string): string {
  return runId.replace(/[^A-Za-z0-9_.-]/g, '_').replace(/^\.+/, '_');
}

/**
 * The prefix the run's blobs of `kind` had before {@link blobKeySegment}, or null when it is the same as
 * {@link runBlobPrefix} (a run id of `[A-Za-z0-9.-]` not starting with a dot, e.g. a UUID) or the run id is empty.
 */
export function legacyRunBlobPrefix(kind: string, runId: string): string | null {
  if (runId === '') return null; // `<kind>//`: not a directory of its own in an fs store, and no run id is empty
  const legacy = `${kind}/${legacyRunSegment(runId)}/`;
  return legacy === runBlobPrefix(kind, runId) ? null : legacy;
}
