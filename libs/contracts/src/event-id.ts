import { parse as uuidParse, v5 as uuidv5 } from 'uuid';

/**
 * Namespace of every id {@link derivedEventId} makes (a fixed random UUID; changing it changes every derived id,
 * so it never changes).
 */
export const KEYFLOW_EVENT_ID_NAMESPACE = '5b0c4b8e-6a51-4f1e-9d53-3c2f6f0a7e21';

/** The namespace as bytes, parsed once (uuid's v5 parses a string namespace on every call). */
const NAMESPACE_BYTES = uuidParse(KEYFLOW_EVENT_ID_NAMESPACE);

/** Length of a derived event id: a UUID in its canonical text form (8-4-4-4-12 hex digits). */
export const DERIVED_EVENT_ID_LENGTH = 36;

/**
 * The id of an event derived from another one: a name-based UUID version 5 (SHA-1) of `<cause>\u0000<name>` in
 * {@link KEYFLOW_EVENT_ID_NAMESPACE}, RFC 9562 section 5.5 (https://www.rfc-editor.org/rfc/rfc9562#section-5.5),
 * computed by the `uuid` package's `v5` over the name's UTF-8 bytes (a lone surrogate, which is not text, counts as
 * U+FFFD, as in the UTF-8 of a Kafka key or an Avro string).
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
  // As bytes: uuid's v5 turns a string into UTF-8 with a JavaScript loop per character.
  return uuidv5(Buffer.from(`${cause}\u0000${String(name)}`, 'utf8'), NAMESPACE_BYTES);
}
