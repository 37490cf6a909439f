import { z } from 'zod';

/**
 * An optional string setting of the services' environment schemas where a variable set to the empty string (or
 * blanks) counts as unset: compose files and `env:` lists pass unset variables through as "".
 */
export const unsetWhenEmpty = z.preprocess(
  (v) => (typeof v === 'string' && v.trim() === '' ? undefined : v),
  z.string().optional(),
);
