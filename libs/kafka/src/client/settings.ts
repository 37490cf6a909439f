import { z } from 'zod';

/**
 * `schema` as an optional setting of the services' environment schemas where a variable set to the empty string (or
 * blanks) counts as unset: compose files and `env:` lists pass unset variables through as "".
 */
export const blankAsUnset = <T extends z.ZodTypeAny>(schema: T) =>
  z.preprocess((v) => (typeof v === 'string' && v.trim() === '' ? undefined : v), schema.optional());

/** An optional string setting where blanks count as unset (see {@link blankAsUnset}). */
export const unsetWhenEmpty = blankAsUnset(z.string());
