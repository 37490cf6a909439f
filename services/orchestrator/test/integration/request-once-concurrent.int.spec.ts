import { randomUUID } from 'node:crypto';
import { HttpException } from '@nestjs/common';
import Redis from 'ioredis';
import { eventually } from '@keyflow/testing';
import { answerOnce, type RunRequest } from '../../src/api/request-once';
import { RequestKeys } from '../../src/api/request-keys';
import { RefusedRequest, type RunsService } from '../../src/api/runs.service';

jest.setTimeout(60_000);

/** A promise and the function that resolves it: holds a request's work "in flight". */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { open, opened };
}

/** The HTTP status and body `answerOnce` answered, whether it resolved (202) or threw. */
async function outcome(p: Promise<unknown>): Promise<{ status: number; body: unknown }> {
  try {
    return { status: 202, body: await p };
  } catch (e) {
    if (e instanceof HttpException) return { status: e.getStatus(), body: e.getResponse() };
    throw e;
  }
}

/**
 * docs/guarantees/deploys-and-client-retries.md, "In the API: the first answer, again": a key is bound to its first
 * request and then to that request's first answer, for every API instance (Redis). A client that times out retries
 * with the same key while its first request is still in flight, often on another instance (one just restarted in a
 * rolling deploy, answering 503 CATCHING_UP, or one whose read model already shows the run ended, answering 409).
 * That concurrent repeat must neither free the key the first request holds nor replace the answer it stored.
 */
describe('Idempotency-Key of a run request sent twice concurrently (real Redis)', () => {
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6390', { lazyConnect: true });
  const prefix = `t-request-once-${randomUUID().slice(0, 8)}.`;
  const runs = {
    keys: new RequestKeys(redis, prefix),
    settings: { idempotencyKeyTtlMs: 60_000, signalBufferLimit: 100 },
  } as unknown as RunsService;
  const redisKey = (r: RunRequest) => `${prefix}keyflow:api:run-request:${r.runId}:${r.kind}:${r.key}`;

  beforeAll(() => redis.connect());
  afterAll(async () => {
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });

  it('a repeat answered 503 while the first is in flight leaves the key bound: later repeats get the first answer, another request 422', async () => {
    const r: RunRequest = {
      kind: 'signal',
      runId: 'run-1',
      key: 'k-1',
      body: { signal: 'approved', payload: 1 },
    };
    const first = gate();
    const firstAnswer = answerOnce(runs, r, async () => {
      await first.opened;
      return { accepted: true };
    });
    await eventually('the first request bound the key', () => redis.exists(redisKey(r)), {
      until: (n) => n === 1,
    });

    // The client's retry reaches an instance still catching up.
    const repeat = await outcome(
      answerOnce(runs, r, async () => {
        throw new RefusedRequest(503, 'CATCHING_UP', 'run-1 is not known yet');
      }),
    );
    expect(repeat.status).toBe(503);

    first.open();
    const answered = await firstAnswer;
    expect(answered).toMatchObject({ accepted: true });

    // Another retry: the first answer, nothing sent again.
    const work = jest.fn(async () => ({ accepted: true }));
    expect(await outcome(answerOnce(runs, r, work))).toEqual({ status: 202, body: answered });
    expect(work).not.toHaveBeenCalled();

    // The same key with another request: refused, nothing sent.
    const other = jest.fn(async () => ({ accepted: true }));
    const reused = await outcome(answerOnce(runs, { ...r, body: { signal: 'approved', payload: 2 } }, other));
    expect(reused.status).toBe(422);
    expect(other).not.toHaveBeenCalled();
  });

  it('a repeat refused (409) after the first was answered 202 does not replace that first answer', async () => {
    const r: RunRequest = { kind: 'cancel', runId: 'run-2', key: 'k-2', body: { reason: 'stop' } };
    const first = gate();
    const firstAnswer = answerOnce(runs, r, async () => {
      await first.opened;
      return { accepted: true };
    });
    await eventually('the first request bound the key', () => redis.exists(redisKey(r)), {
      until: (n) => n === 1,
    });
    // The repeat finds no answer yet, so it is sent again; by the time it is checked, the run has ended (the first
    // cancel's doing) and it is refused.
    const second = gate();
    const repeatAnswer = outcome(
      answerOnce(runs, r, async () => {
        await second.opened;
        throw new RefusedRequest(409, 'RUN_ENDED', 'run-2 has ended (cancelled)');
      }),
    );
    first.open();
    const answered = await firstAnswer;
    second.open();
    expect((await repeatAnswer).status).toBe(409);

    const work = jest.fn(async () => ({ accepted: true }));
    expect(await outcome(answerOnce(runs, r, work))).toEqual({ status: 202, body: answered });
    expect(work).not.toHaveBeenCalled();
  });

  it('a "not yet" answer (404 of a run the read model has not read yet, 429 of a full signal buffer) is not stored: the retry with the same key is sent and answered 202', async () => {
    for (const [status, code] of [
      [404, 'NOT_FOUND'],
      [429, 'SIGNAL_BUFFER_FULL'],
    ] as const) {
      const r: RunRequest = {
        kind: 'signal',
        runId: `run-not-yet-${status}`,
        key: 'k-1',
        body: { signal: 'approved', payload: 1 },
      };
      const early = await outcome(
        answerOnce(runs, r, async () => {
          throw new HttpException({ message: `not yet (${code})`, code }, status);
        }),
      );
      expect(early.status).toBe(status);
      // The soak found it: a signal sent right after the run's first step completed met a read model 100 ms behind,
      // and every retry with the same key got that stored 404, for good (43 of 18,000 runs never approved).
      const work = jest.fn(async () => ({ accepted: true }));
      const retried = await outcome(answerOnce(runs, r, work));
      expect([status, retried.status]).toEqual([status, 202]);
      expect(work).toHaveBeenCalledTimes(1);
    }
  });
});
