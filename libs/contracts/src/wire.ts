import type { Type } from 'avsc';
import { MissingMagicByteError, type MessageLocation } from './errors';

/** Confluent wire format: byte 0 is the magic byte 0, bytes 1-4 the schema id (big-endian int32), then the body. */
export const MAGIC_BYTE = 0;
export const HEADER_BYTES = 5;

/**
 * Splits a Confluent-framed value into schema id and body (Confluent docs, "Wire format").
 * @throws MissingMagicByteError when the value is shorter than the header or byte 0 is not 0.
 */
export function parseWireFormat(
  value: Buffer,
  location: MessageLocation,
): { schemaId: number; body: Buffer } {
  if (value.length < HEADER_BYTES)
    throw new MissingMagicByteError(
      location,
      `${value.length} bytes: shorter than the 5-byte header (magic byte 0 + schema id)`,
    );
  if (value[0] !== MAGIC_BYTE)
    throw new MissingMagicByteError(
      location,
      `first byte is 0x${value[0].toString(16).padStart(2, '0')}, not the magic byte 0x00`,
    );
  return { schemaId: value.readInt32BE(1), body: value.subarray(HEADER_BYTES) };
}

/** Frames an Avro body with the wire header for `schemaId`. */
export function toWireFormat(schemaId: number, body: Buffer): Buffer {
  const out = Buffer.allocUnsafe(HEADER_BYTES + body.length);
  out[0] = MAGIC_BYTE;
  out.writeInt32BE(schemaId, 1);
  body.copy(out, HEADER_BYTES);
  return out;
}

/** Bodies up to this many bytes are encoded in one reused buffer; larger ones take avsc's `toBuffer` (1 MiB). */
const SCRATCH_MAX_BYTES = 1 << 20;
let scratch = Buffer.allocUnsafe(16 * 1024);

/**
 * Framed values are handed out as views of a shared slab of this many bytes, as Node's own `Buffer.allocUnsafe` pool
 * does (8 KiB): a value kept alive keeps its slab (at most this many bytes) alive.
 */
const SLAB_BYTES = 16 * 1024;
/**
 * A framed value larger than this that does not fit the current slab's free space gets a buffer of its own (and its
 * type's next value too, until one is this small again).
 */
const SLAB_VALUE_MAX_BYTES = SLAB_BYTES / 4;
let slab = Buffer.allocUnsafe(SLAB_BYTES);
/** Where the slab's free space starts (a multiple of 8). */
let slabUsed = 0;
/** The types whose last value did not fit a slab's share: their next value is encoded by {@link encodeOwn} at once. */
const lastTooLarge = new WeakSet<Type>();

/**
 * Encodes `datum` with the Avro `type` and frames it for `schemaId`: the same bytes as
 * `toWireFormat(schemaId, type.toBuffer(datum))`. A value that fits the free space of a shared 16 KiB slab, or of a
 * fresh one when it is at most 4 KiB, is encoded there in place and returned as a view of it (no copy: the copy out
 * of a reused buffer cost more than the encode of a small record); any other (and the next value of a type whose last
 * one was over 4 KiB) is encoded in a reused buffer and copied into one of its own. Returned values never overlap and
 * are never written again.
 * @throws what `type.toBuffer` throws for a datum the type does not accept.
 */
export function encodeWireFormat(schemaId: number, type: Type, datum: unknown): Buffer {
  // A type whose last value was too large for the slab skips the attempt (a refused attempt walks the whole datum).
  if (lastTooLarge.has(type)) return encodeOwn(schemaId, type, datum);
  const start = slabUsed;
  const end = type.encode(datum, slab, start + HEADER_BYTES);
  if (end < 0) {
    // A negative result is the number of bytes missing (avsc's Type#encode): the value starts a new slab, if it is
    // small enough for one.
    if (SLAB_BYTES - start - end > SLAB_VALUE_MAX_BYTES) {
      lastTooLarge.add(type);
      return encodeOwn(schemaId, type, datum);
    }
    slab = Buffer.allocUnsafe(SLAB_BYTES);
    slabUsed = 0;
    return encodeWireFormat(schemaId, type, datum);
  }
  slabUsed = (end + 7) & ~7;
  const out = slab.subarray(start, end);
  out[0] = MAGIC_BYTE;
  out.writeInt32BE(schemaId, 1);
  return out;
}

/**
 * {@link encodeWireFormat} of a value too large for the slab (or of a type whose last one was): encoded in `scratch`,
 * copied to its own buffer. A value that turns out small enough sends its type's next value to the slab again.
 */
function encodeOwn(schemaId: number, type: Type, datum: unknown): Buffer {
  let end = type.encode(datum, scratch, HEADER_BYTES);
  if (end < 0) {
    const needed = scratch.length - end;
    if (needed > SCRATCH_MAX_BYTES) return toWireFormat(schemaId, type.toBuffer(datum));
    scratch = Buffer.allocUnsafe(Math.min(SCRATCH_MAX_BYTES, 2 ** Math.ceil(Math.log2(needed))));
    end = type.encode(datum, scratch, HEADER_BYTES);
  }
  if (end <= SLAB_VALUE_MAX_BYTES) lastTooLarge.delete(type);
  const out = Buffer.allocUnsafe(end);
  scratch.copy(out, HEADER_BYTES, HEADER_BYTES, end);
  out[0] = MAGIC_BYTE;
  out.writeInt32BE(schemaId, 1);
  return out;
}
