import * as avsc from 'avsc';
import type { AvroSchema } from '@keyflow/schemas';

/**
 * The avsc type of `schema`, built with the options every Avro type of keyflow is built with, so readers, writers and
 * the PII masking walk agree on a datum's shape:
 * - unions of several records are wrapped (`{ 'dev.keyflow.events.X': {...} }`), nullable unions are not
 *   (`wrapUnions: 'auto'`);
 * - longs stay avsc's default: decoding a long beyond 2^53 throws "potential precision loss" (never silently rounded),
 *   which the codec reports as MalformedPayloadError.
 * A fresh options object per call: avsc stores its name registry in the options it is given.
 * @throws Error (avsc's) when `schema` is not a valid Avro schema.
 */
export function avroType(schema: AvroSchema): avsc.Type {
  return avsc.Type.forSchema(schema as avsc.Schema, { wrapUnions: 'auto', omitRecordMethods: true } as never);
}
