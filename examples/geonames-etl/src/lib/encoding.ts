import { Transform, type TransformCallback } from 'node:stream';
import { isUtf8 } from 'node:buffer';

// UTF-8 checks on raw bytes with the platform's fatal decoder (WHATWG Encoding Standard, "utf-8" decoder with
// error mode "fatal"): an input byte sequence that is not UTF-8 is found where it is, never turned into U+FFFD
// and loaded. A real U+FFFD written as valid UTF-8 (EF BF BD) is a character like any other.

/** A fatal decoder that keeps a leading U+FEFF (callers strip a file's BOM themselves). */
const fatal = () => new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Where `bytes` stop being UTF-8: the 0-based `offset` of the first byte of the bad sequence, and that byte. */
export interface Utf8Error {
  readonly offset: number;
  readonly byte: number;
}

/** `bytes` decoded as UTF-8, or where they are not UTF-8. */
export type Utf8Result = { readonly ok: true; readonly text: string } | ({ readonly ok: false } & Utf8Error);

/**
 * Decodes `bytes` as UTF-8; on failure, the offset of the first bad sequence. Validity is checked with
 * `buffer.isUtf8` (simdutf: the same rule as the fatal decoder, far cheaper per short field); invalid input is
 * located with the fatal decoder (`firstInvalid`). A leading U+FEFF is kept.
 */
export function decodeUtf8(bytes: Uint8Array): Utf8Result {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (isUtf8(buffer)) return { ok: true, text: buffer.toString('utf8') };
  const offset = firstInvalid(bytes);
  return { ok: false, offset, byte: bytes[offset] };
}

/** `0xFF` for 255. */
export function hexByte(byte: number): string {
  return `0x${byte.toString(16).toUpperCase().padStart(2, '0')}`;
}

/**
 * The offset of the first invalid sequence in `bytes` (which must not be valid UTF-8; error path only).
 * The shortest prefix the streaming fatal decoder refuses ends at the first byte that cannot continue valid
 * UTF-8; the bad sequence starts at the last point before it where the decoded text is complete (a truncated
 * multi-byte sequence such as E2 82 followed by 'A' starts at E2). Costs O(n log n) decodes of prefixes.
 */
function firstInvalid(bytes: Uint8Array): number {
  let lo = 1;
  let hi = bytes.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (refuses(bytes.subarray(0, mid))) hi = mid;
    else lo = mid + 1;
  }
  const failsAt = lo - 1;
  for (let start = failsAt; start >= Math.max(0, failsAt - 3); start -= 1) {
    if (!refuses(bytes.subarray(0, start), false)) return start;
  }
  return failsAt;
}

function refuses(prefix: Uint8Array, stream = true): boolean {
  try {
    fatal().decode(prefix, { stream });
    return false;
  } catch {
    return true;
  }
}

// JSON arrays are parsed as a stream with no record boundaries in bytes, so the bad bytes are marked where they
// are: each bad sequence becomes the JSON escapes of lone surrogates DCFE, one DC30-DC39 per decimal digit of its
// byte offset, DCFD. Inside a JSON string they decode to lone surrogates, which no valid UTF-8 can produce, so the
// record is rejected as INVALID_ENCODING with the offset; anywhere else they are a JSON syntax error, as the bad
// bytes themselves would be.
const MARK_START = 0xdcfe;
const MARK_END = 0xdcfd;
const escape = (unit: number) => `\\u${unit.toString(16)}`;
const MARK = /\uDCFE([\uDC30-\uDC39]+)\uDCFD/;

/** The JSON text standing for a bad sequence at file offset `offset` (see above). */
function mark(offset: number): string {
  const digits = [...String(offset)].map((d) => escape(0xdc30 + Number(d))).join('');
  return `${escape(MARK_START)}${digits}${escape(MARK_END)}`;
}

/** The file byte offset of the first bad sequence marked in `text` by `markInvalidUtf8`, if any. */
export function markedOffset(text: string): number | undefined {
  const m = MARK.exec(text);
  return m ? Number([...m[1]].map((c) => (c.charCodeAt(0) - 0xdc30).toString()).join('')) : undefined;
}

/**
 * A Transform of the raw bytes of a JSON file where every sequence that is not UTF-8 is replaced by a mark of
 * its byte offset (see `markedOffset`, ASCII text) instead of becoming U+FFFD downstream. A UTF-8 BOM at the start is kept (JSON
 * parsers skip it or not, as before). Memory: one chunk plus at most 3 carried bytes.
 */
export function markInvalidUtf8(): Transform {
  let carry = Buffer.alloc(0);
  let base = 0; // file offset of carry[0]
  const convert = (bytes: Buffer, final: boolean): Buffer => {
    const tail = final ? 0 : incompleteTail(bytes);
    const body = bytes.subarray(0, bytes.length - tail);
    carry = Buffer.from(bytes.subarray(bytes.length - tail));
    const at = base;
    base += body.length;
    if (isUtf8(body)) return body; // the usual case: the bytes pass through as they are
    const out: Buffer[] = [];
    let from = 0;
    while (from < body.length) {
      const rest = body.subarray(from);
      if (isUtf8(rest)) {
        out.push(rest);
        break;
      }
      const bad = firstInvalid(rest);
      out.push(rest.subarray(0, bad), Buffer.from(mark(at + from + bad), 'latin1'));
      from += bad + badLength(rest.subarray(bad));
    }
    return Buffer.concat(out);
  };
  return new Transform({
    readableObjectMode: false,
    transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback) {
      done(null, convert(Buffer.concat([carry, chunk]), false));
    },
    flush(done: TransformCallback) {
      done(null, convert(carry, true));
    },
  });
}

/** Bytes at the end of `bytes` that start a multi-byte sequence the next chunk may complete (0 to 3). */
function incompleteTail(bytes: Uint8Array): number {
  for (let back = 1; back <= Math.min(3, bytes.length); back += 1) {
    const b = bytes[bytes.length - back];
    if (b < 0x80) return 0;
    if (b >= 0xc0) {
      const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
      return need > back ? back : 0;
    }
  }
  return 0;
}

/** Length of the bad sequence at the start of `bytes`: its lead byte and the continuation bytes that follow. */
function badLength(bytes: Uint8Array): number {
  let n = 1;
  if (bytes[0] >= 0xc0) while (n < 4 && n < bytes.length && (bytes[n] & 0xc0) === 0x80) n += 1;
  return n;
}
