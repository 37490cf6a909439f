import { randomUUID } from 'node:crypto';
import { HttpException } from '@nestjs/common';
import { derivedEventId } from '@keyflow/contracts';
import { fingerprint } from './request-keys';
import {
  guarded,
  IDEMPOTENCY_KEY_REUSED,
  KEY_SPACES,
  RefusedRequest,
  type RunsService,
} from './runs.service';
import { answer } from './validation';

/** A run request the API makes idempotent: what the client asks of run `runId`, and its Idempotency-Key. */
export interface RunRequest {
  kind: 'signal' | 'cancel' | 'terminate' | 'retry';
  runId: string;
  /** The Idempotency-Key header, if the client sent one. */
  key?: string;
  /** The request's parsed body: its fingerprint tells a repeat from another request with the same key. */
  body: unknown;
}

/**
 * The event id of a run request: with an Idempotency-Key, a UUID v5 of the run, the request's kind, the key and
 * the request's fingerprint (`derivedEventId`), so the same request always carries the same id and the engine
 * applies it once per run (reducer: `RunState.requestIds`, ignored as DUPLICATE_REQUEST); without one, random.
 */
export function runRequestId(r: RunRequest): string {
  if (r.key === undefined) return randomUUID();
  return derivedEventId(r.runId, `${r.kind}\n${r.key}\n${fingerprint(r.body)}`);
}

/**
 * Refusals that say "not now" rather than "no": 404 (a run the read model has not read yet: it is eventually
 * consistent, and a signal sent right after a run's step completed may reach an instance 100 ms behind) and 429 (a
 * full signal buffer). Like a 5xx they are not stored as the key's answer, so the client's retry is sent again.
 */
const NOT_YET = new Set([404, 429]);

/**
 * Answers a run request once per Idempotency-Key: `work` gets the request's id (see {@link runRequestId}) and its
 * result is the 202 answer. With a key, the key is bound in Redis (shared by every API instance) for the service's
 * `idempotencyKeyTtlMs` (at least the run retention) to the request's fingerprint, then to its first answer (a 202,
 * or a refusal below 500 such as 409 RUN_ENDED, except the "not yet" ones: 404 and 429, see NOT_YET): the same request again gets that answer, same status and body,
 * and nothing is sent again. A repeat that finds no answer yet (the first one still in flight, or its API died
 * before answering) is sent again with the same id, which the engine applies once. The first answer stored stays
 * (`RequestKeys.settle`): a concurrent repeat's later answer (a 409 once the first cancel ended the run) does not
 * replace it. An answer of 500 or more (a broker or Redis away), 404 or 429 to the request that bound the key frees it, unless a
 * concurrent repeat was answered meanwhile, so the client's retry goes through; a repeat's own 5xx frees nothing,
 * since the request that bound the key may still be sent.
 * @throws HttpException with the first answer's status and body, or as `answer` maps `work`'s errors; 422
 *   IDEMPOTENCY_KEY_REUSED (naming the key) for a key bound to another request; 503 STORE_UNAVAILABLE when Redis does
 *   not answer.
 */
export async function answerOnce<T extends object>(
  runs: RunsService,
  r: RunRequest,
  work: (requestId: string) => Promise<T>,
): Promise<T & { requestId: string }> {
  const requestId = runRequestId(r);
  const run = async () => ({ ...(await work(requestId)), requestId });
  if (r.key === undefined) return answer(run);
  const key = `${r.runId}:${r.kind}:${r.key}`;
  const fp = fingerprint(r.body);
  const bound = await answer(() =>
    guarded(() =>
      runs.keys.claim(
        KEY_SPACES.runRequest,
        key,
        { fingerprint: fp, runId: r.runId },
        runs.settings.idempotencyKeyTtlMs,
      ),
    ),
  );
  if (bound && bound.fingerprint !== fp)
    return answer(() => {
      throw new RefusedRequest(
        422,
        IDEMPOTENCY_KEY_REUSED,
        `Idempotency-Key ${r.key} was used for another ${r.kind} request of run ${r.runId}; nothing was sent`,
        { idempotencyKey: r.key, runId: r.runId, fingerprints: { stored: bound.fingerprint, request: fp } },
      );
    });
  /** Whether this call bound the key: only then may it free it. */
  const claimed = !bound;
  if (bound?.answer) {
    if (bound.answer.status >= 300)
      throw new HttpException(bound.answer.body as Record<string, unknown>, bound.answer.status);
    return bound.answer.body as T & { requestId: string };
  }
  const settle = (status: number, body: unknown) =>
    runs.keys
      .settle(KEY_SPACES.runRequest, key, { fingerprint: fp, runId: r.runId, answer: { status, body } })
      .catch(() => undefined); // the answer is given anyway; a repeat is then sent again, and applied once
  try {
    const body = await answer(run);
    await settle(202, body);
    return body;
  } catch (e) {
    const status = e instanceof HttpException ? e.getStatus() : 500;
    if (status < 500 && !NOT_YET.has(status)) await settle(status, (e as HttpException).getResponse());
    else if (claimed)
      await runs.keys.releaseUnanswered(KEY_SPACES.runRequest, key, fp).catch(() => undefined);
    throw e;
  }
}
