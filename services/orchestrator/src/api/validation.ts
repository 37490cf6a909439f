import { HttpException } from '@nestjs/common';
import { isRetryable } from '@keyflow/errors';
import { RefusedRequest, RequestError } from './runs.service';
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

/**
 * Runs a request's work and turns its refusals into HTTP answers: RefusedRequest -> its status with `code` and
 * details; RequestError -> 400 (404 when `notFound`) with `errors`; an error that says trying again may help (a
 * `retryable: true` error of a lib, a retriable kafkajs error: a broker or the registry not answering) -> 503 with
 * its `code` and `retryable: true`. Anything else propagates (500).
 */
export async function answer<T>(f: () => Promise<T> | T): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (e instanceof RefusedRequest)
      throw new HttpException({ message: e.message, code: e.code, ...e.details }, e.status);
    if (e instanceof RequestError)
      throw new HttpException({ message: e.message, errors: e.fields }, e.notFound ? 404 : 400);
    if (isRetryable(e, false))
      throw new HttpException(
        {
          message: (e as Error).message,
          code: (e as { code?: string }).code ?? (e as Error).name,
          retryable: true,
        },
        503,
      );
    throw e;
  }
}
