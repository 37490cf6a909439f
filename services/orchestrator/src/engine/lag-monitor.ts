import type { Kafka } from '@keyflow/kafka';
import {
  groupLag,
  listDlqTopics,
  DlqLedgerView,
  summarizeDlqs,
  type DlqSummary,
  type LedgerCodec,
  type PartitionLag,
} from '@keyflow/ops';
import type { Logger } from '@keyflow/observability';
import type { OrchestratorMetrics } from './metrics';

/** What one pass measured; topics are logical names. */
export interface LagReport {
  /** When the pass that measured these began, ms since epoch (the figures are at least this recent). */
  at: number;
  lags: Array<PartitionLag & { group: string }>;
  /** Every DLQ topic, its pending records counted against the DLQ ledger. */
  dlqs: DlqSummary[];
}

/**
 * Sets the lag metrics (consumer_lag_records, consumer_oldest_unread_age_seconds, dlq_records) every `intervalMs`:
 * per group of `groups`, topic and partition, the records still to read as a read_committed consumer counts them
 * (libs/ops groupLag: transaction markers and aborted records are not lag), and the pending records of every DLQ
 * topic of this deployment's catalog under the topic prefix (those the DLQ ledger does not name as redriven or discarded). Topics are labelled by
 * logical name. A pass that fails is logged and the previous figures stay (consumer_lag_scraped_at_seconds says how
 * old they are). The last pass's figures are also kept for the ops console ({@link latest}).
 */
export class LagMonitor {
  private timer?: NodeJS.Timeout;
  private running?: { startedAt: number; done: Promise<void> };
  private last?: LagReport;
  /** Figures measured before this (ms since epoch) are not fresh for anyone (see {@link invalidate}). */
  private staleBefore = 0;
  /**
   * The DLQ ledger as this process last read it, brought up to date by each pass and by the ops API's DLQ views and
   * redrives: each read costs the entries appended since, not the ledger's history.
   */
  readonly ledger: DlqLedgerView;

  constructor(
    private readonly kafka: Kafka,
    private readonly metrics: OrchestratorMetrics,
    private readonly logger: Logger,
    /**
     * `codec` names the topics (its prefix) and reads the DLQ ledger; `dlqs`, the DLQs of this deployment's catalog
     * (logical names: Engine.topics), default every DLQ keyflow declares under the prefix (libs/ops isCatalogDlq).
     */
    private readonly o: {
      groups: string[];
      intervalMs: number;
      codec: LedgerCodec;
      dlqs?: ReadonlySet<string>;
    },
  ) {
    this.ledger = new DlqLedgerView(kafka, o.codec);
  }

  /** The last pass's figures, or undefined before the first pass ended. */
  latest(): LagReport | undefined {
    return this.last;
  }

  /**
   * Figures measured no earlier than `maxAgeMs` before the call (and after the last {@link invalidate}): the last
   * pass's if recent enough, else those of the running pass if it began recently enough, else those of a new pass.
   * A failed pass leaves the previous figures (their `at` says how old they are).
   */
  async fresh(maxAgeMs: number): Promise<LagReport | undefined> {
    const since = Math.max(Date.now() - maxAgeMs, this.staleBefore);
    if (this.last && this.last.at >= since) return this.last;
    const running = this.running;
    if (running) {
      await running.done;
      if (running.startedAt >= since) return this.last;
    }
    await this.pass();
    return this.last;
  }

  /** Marks the figures measured so far as stale (a DLQ action changed them): the next {@link fresh} measures. */
  invalidate(): void {
    this.staleBefore = Date.now();
  }

  start(): void {
    if (this.o.intervalMs <= 0) return;
    this.timer = setInterval(() => void this.pass(), this.o.intervalMs);
    this.timer.unref();
    void this.pass();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private logical(topic: string): string {
    return this.o.codec.logical(topic) ?? topic;
  }

  /** One pass; at most one at a time (a call during a pass joins it), given up after twice the interval (at least 60 s). */
  pass(): Promise<void> {
    if (!this.running) {
      const startedAt = Date.now();
      this.running = {
        startedAt,
        done: this.guardedPass(startedAt).finally(() => (this.running = undefined)),
      };
    }
    return this.running.done;
  }

  private async guardedPass(startedAt: number): Promise<void> {
    const limitMs = Math.max(60_000, 2 * this.o.intervalMs);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.measure(startedAt),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`lag monitor pass took over ${limitMs} ms`)), limitMs);
        }),
      ]);
    } catch (err) {
      this.logger.warn({ err }, 'lag monitor pass failed; the lag metrics keep their previous values');
    } finally {
      clearTimeout(timer);
    }
  }

  /** One measurement; its figures replace the last ones only if they are newer (a pass given up may end late). */
  private async measure(startedAt: number): Promise<void> {
    const lags = [];
    for (const group of this.o.groups)
      for (const l of await groupLag(this.kafka, group, { exactUpTo: 1_000 }))
        lags.push({ group, ...l, topic: this.logical(l.topic) });
    const dlqTopics = await listDlqTopics(this.kafka, this.o.codec.topicPrefix, this.o.dlqs);
    const handled = await this.ledger.refresh();
    // A large DLQ is not read every pass: its offset span is counted (an upper bound).
    const dlqs = (
      await summarizeDlqs(this.kafka, dlqTopics, {
        exactUpTo: 10_000,
        handled,
        handledOffsets: this.ledger.offsets,
      })
    ).map((d) => ({
      ...d,
      topic: this.logical(d.topic),
    }));
    if (this.last && this.last.at > startedAt) return;
    const m = this.metrics;
    m.consumerLag.reset();
    m.oldestUnread.reset();
    m.dlqRecords.reset();
    for (const l of lags) {
      const labels = { group: l.group, topic: l.topic, partition: String(l.partition) };
      m.consumerLag.set(labels, l.lag);
      m.oldestUnread.set(labels, (l.oldestAgeMs ?? 0) / 1000);
    }
    for (const d of dlqs) m.dlqRecords.set({ topic: d.topic }, d.pending);
    m.lagScrapedAt.set(startedAt / 1000);
    this.last = { at: startedAt, lags, dlqs };
  }
}
