import { hash } from 'node:crypto';
import { parse as uuidParse } from 'uuid';

/**
 * Namespace of every id {@link derivedEventId} makes (a fixed random UUID; changing it changes every derived id,
 * so it never changes).
 */
export const KEYFLOW_EVENT_ID_NAMESPACE = '5b0c4b8e-6a51-4f1e-9d53-3c2f6f0a7e21';

/** The namespace as bytes, parsed once. */
const NAMESPACE_BYTES = uuidParse(KEYFLOW_EVENT_ID_NAMESPACE);

/**
 * The bytes hashed: the namespace, then the name's UTF-8 written after it. Reused by every call (each writes and hashes
 * it synchronously), grown when a name needs more.
 */
let scratch = withNamespace(Buffer.allocUnsafe(1024));

function withNamespace(buf: Buffer): Buffer {
  buf.set(NAMESPACE_BYTES, 0);
  return buf;
}

/** Length of a derived event id: a UUID in its canonical text form (8-4-4-4-12 hex digits). */
export const DERIVED_EVENT_ID_LENGTH = 36;

/**
 * The id of an event derived from another one: a name-based UUID version 5 (SHA-1) of `<cause>\u0000<name>` in
 * {@link KEYFLOW_EVENT_ID_NAMESPACE}, RFC 9562 section 5.5 (https://www.rfc-editor.org/rfc/rfc9562#section-5.5),
 * over the name's UTF-8 bytes (a lone surrogate, which is not text, counts as U+FFFD, as in the UTF-8 of a Kafka key
 * or an Avro string): the `uuid` package's `v5` of those bytes, which the unit tests compare it with. Computed here
 * with one `crypto.hash` call into hex (a third of `v5`'s time, which builds a Hash object and a byte array per id:
 * 8 % of the engine's CPU in a burst of starts, docs/benchmarks/history.md).
 *
 * Deterministic (re-processing one input after an aborted transaction, or a redelivered task, yields the same ids,
 * so readers can deduplicate), always {@link DERIVED_EVENT_ID_LENGTH} characters however long a chain of derivations
 * gets (a result's id derived from its command's, the next command's from that result's, ...), and distinct for
 * distinct (cause, name) pairs (the NUL separator keeps `('a:b', 'c')` and `('a', 'b:c')` apart).
 *
 * @param cause id of the causing event (any string, e.g. a random UUID or another derived id)
 * @param name what is derived from it: an output index (0, 1, ...) or a name (`completed`, `snapshot`, a timer id)
 * @returns a lower-case UUID string, 36 characters
 */
export function derivedEventId(cause: string, name: string | number): string {
  const text = `${cause}\u0000${String(name)}`;
  // At most 3 UTF-8 bytes per UTF-16 unit (a surrogate pair: 4 bytes for 2 units).
  if (scratch.length < 16 + text.length * 3)
    scratch = withNamespace(Buffer.allocUnsafe(32 + text.length * 6));
  const end = 16 + scratch.write(text, 16, 'utf8');
  const h = hash('sha1', scratch.subarray(0, end), 'hex');
  // The first 16 bytes of the digest, version 5 in the high nibble of byte 6 (hex digit 12), the variant 10xx in the
  // high bits of byte 8 (hex digit 16): RFC 9562 section 5.5.
  const variant = ((parseInt(h[16], 16) & 0x3) | 0x8).toString(16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}
