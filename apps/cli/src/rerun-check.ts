import type { Redis } from 'ioredis';
import {
  createRedis,
  IdempotencyStore,
  idempotencyKeyPrefix,
  redisConnectionFromEnv,
  type RecordState,
} from '@keyflow/idempotency';
import type { CheckedCommand } from '@keyflow/ops';
import type { RerunFacts, RunView } from '@keyflow/workflow';
import { api, ApiError } from './api';
import type { CliContext } from './context';

/** Record states whose command is answered from the record (re-published), never run: the workers' own rule. */
const STORED: Record<RecordState, boolean> = {
  completed: true,
  failed: true,
  fenced: true,
  running: false, // the group is stopped (replay) or the command is not delivered (DLQ): a lease is a crashed worker's
  absent: false,
};

/**
 * What the CLI knows of a task command it would deliver again (`keyflow replay`, `keyflow dlq redrive`), for
 * libs/workflow `rerunVerdict`: the worker's record of its key and attempt (Redis at REDIS_URL, when `redis`), the
 * engine's view of its run (GET /runs/:id of the orchestrator's API, when `--api` or KEYFLOW_API_URL gives it; one
 * call per run), the record's age and WORKER_COMPLETION_TTL_MS. Close it when done.
 */
export class RerunCheck {
  private redis?: Redis;
  private store?: IdempotencyStore;
  private readonly runs = new Map<string, Promise<RunView | null>>();
  private readonly endpoint;

  constructor(
    private readonly ctx: CliContext,
    o: { redis: boolean; api?: string },
  ) {
    this.endpoint = o.api !== undefined || ctx.env.KEYFLOW_API_URL ? ctx.endpoint(o.api) : undefined;
    if (o.redis && ctx.env.REDIS_URL) {
      this.redis = createRedis(redisConnectionFromEnv(ctx.env.REDIS_URL), {
        maxRetriesPerRequest: 2,
        lazyConnect: true,
      });
      this.store = new IdempotencyStore(this.redis, {
        keyPrefix: idempotencyKeyPrefix(ctx.env.KEYFLOW_TOPIC_PREFIX),
      });
    }
  }

  /** Whether the engine's view is asked (the orchestrator's API is known). */
  get asksEngine(): boolean {
    return this.endpoint !== undefined;
  }

  /**
   * The facts of one command; `ageMs` is how old its record is (ms); `need.workerRecord` false leaves Redis out.
   * @throws ApiError when the orchestrator answers an error other than 404 (a run it does not know: `run` null);
   *   fetch's TypeError when nothing answers at its URL; Redis errors
   */
  async facts(
    cmd: CheckedCommand,
    ageMs: number,
    need: { workerRecord: boolean } = { workerRecord: true },
  ): Promise<RerunFacts> {
    const stored =
      this.store && need.workerRecord
        ? STORED[await this.store.peek(cmd.idempotencyKey, cmd.attempt ?? 1)]
        : undefined;
    return {
      stored,
      run: this.endpoint ? await this.run(cmd.runId) : undefined,
      ageMs,
      completionTtlMs: this.ctx.env.WORKER_COMPLETION_TTL_MS,
    };
  }

  private run(runId: string): Promise<RunView | null> {
    let p = this.runs.get(runId);
    if (!p) {
      p = api<RunView>(this.endpoint!, 'GET', `/runs/${encodeURIComponent(runId)}`).catch((e: unknown) => {
        if (e instanceof ApiError && e.status === 404) return null;
        throw e;
      });
      this.runs.set(runId, p);
    }
    return p;
  }

  close(): void {
    this.redis?.disconnect();
  }
}
