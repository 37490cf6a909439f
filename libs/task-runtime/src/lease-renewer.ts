import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import type { IdempotencyStore, Lease } from '@keyflow/idempotency';
import type { Logger } from '@keyflow/observability';

/**
 * Keeps the idempotency leases of running tasks alive with ONE timer per executor (not one per task): every lease
 * is renewed at least every third of the lease time (`store.leaseMs / 3`, as before), the renewals of one tick go
 * out together (ioredis pipelines them). A renewal that finds another holder, a record or a fence on the key calls
 * the lease's `lost` callback once; a renewal that cannot reach Redis is retried at the next tick and loses nothing
 * (while Redis is down nobody else can take the lease; once it answers, an empty key is taken back).
 */
export class LeaseRenewer {
  private readonly held = new Map<
    string,
    { lease: Lease; lost: (reason: string) => void; renewedAt: number; renewing: boolean }
  >();
  private timer?: NodeJS.Timeout;
  private readonly periodMs: number;

  constructor(
    private readonly store: Pick<IdempotencyStore, 'renew' | 'leaseMs'>,
    private readonly logger: Logger,
  ) {
    this.periodMs = Math.max(100, Math.floor(store.leaseMs / 3));
  }

  /** Renews `lease` until the returned function is called. */
  watch(lease: Lease, lost: (reason: string) => void): () => void {
    this.held.set(lease.token, { lease, lost, renewedAt: Date.now(), renewing: false });
    if (!this.timer) {
      // Ticks twice per period: a lease waits at most one period between renewals, whenever it was taken.
      // In no task's trace context: the timer serves every task, so its log lines must not carry the first one's ids.
      this.timer = context.with(ROOT_CONTEXT, () =>
        setInterval(() => this.tick(), Math.max(50, Math.floor(this.periodMs / 2))),
      );
      this.timer.unref();
    }
    return () => void this.held.delete(lease.token);
  }

  /** Leases being renewed now. */
  get size(): number {
    return this.held.size;
  }

  private tick(): void {
    if (this.held.size === 0) {
      // Idle: the timer goes until the next watch (at most one tick after the last lease ends).
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    const due = Date.now() - Math.floor(this.periodMs / 2);
    for (const [token, h] of this.held) {
      if (h.renewedAt > due || h.renewing) continue; // one renewal of a lease at a time
      h.renewedAt = Date.now();
      h.renewing = true;
      this.store
        .renew(h.lease)
        .then(
          (still) => {
            if (!still && this.held.delete(token))
              h.lost('another holder, a record or a fence is on the key');
          },
          (err) =>
            this.logger.warn(
              { err, idempotencyKey: h.lease.key },
              'lease renewal failed (Redis unavailable); retrying at the next period',
            ),
        )
        .finally(() => (h.renewing = false));
    }
  }
}
