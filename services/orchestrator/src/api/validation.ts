import { HttpException } from '@nestjs/common';
import type { z } from 'zod';

/**
 * Parses a request body or query with a zod schema.
 * @throws HttpException 400 `{ message: 'invalid request', errors: [{ path, message }] }` naming each failing field
 */
export function parse<T>(schema: z.ZodType<T, z.ZodTypeDef, unknown>, value: unknown): T {
  const r = schema.safeParse(value ?? {});
  if (!r.success)
    throw new HttpException(
      {
        message: 'invalid request',
        errors: r.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })),
      },
      400,
    );
  return r.data;
}
