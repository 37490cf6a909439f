import type { Kafka } from 'kafkajs';
import {
  groupLag,
  listDlqTopics,
  readDlqLedger,
  summarizeDlqs,
  type DlqSummary,
  type LedgerCodec,
  type PartitionLag,
} from '@keyflow/kafka';
import type { Logger } from '@keyflow/observability';
import type { OrchestratorMetrics } from './metrics';

/** What one pass measured; topics are logical names. */
export interface LagReport {
  /** When the pass ended, ms since epoch. */
  at: number;
  lags: Array<PartitionLag & { group: string }>;
  /** Every DLQ topic, its pending records counted against the DLQ ledger. */
  dlqs: DlqSummary[];
}

/**
 * Sets the lag metrics (consumer_lag_records, consumer_oldest_unread_age_seconds, dlq_records) every `intervalMs`:
 * per group of `groups`, topic and partition, the records still to read as a read_committed consumer counts them
 * (libs/kafka groupLag: transaction markers and aborted records are not lag), and the pending records of every DLQ
 * topic under the topic prefix (those the DLQ ledger does not name as redriven or discarded). Topics are labelled by
 * logical name. A pass that fails is logged and the previous figures stay (consumer_lag_scraped_at_seconds says how
 * old they are). The last pass's figures are also kept for the ops console ({@link latest}).
 */
export class LagMonitor {
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private last?: LagReport;

  constructor(
    private readonly kafka: Kafka,
    private readonly metrics: OrchestratorMetrics,
    private readonly logger: Logger,
    private readonly o: { groups: string[]; topicPrefix: string; intervalMs: number; codec: LedgerCodec },
  ) {}

  /** The last pass's figures, or undefined before the first pass ended. */
  latest(): LagReport | undefined {
    return this.last;
  }

  /**
   * The figures at most `maxAgeMs` old: the last pass's if young enough, else those of a new pass (joined when
   * one is running). A failed pass leaves the previous figures (see {@link pass}).
   */
  async fresh(maxAgeMs: number): Promise<LagReport | undefined> {
    if (this.last && Date.now() - this.last.at <= maxAgeMs) return this.last;
    await this.pass();
    return this.last;
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
    return topic.startsWith(this.o.topicPrefix) ? topic.slice(this.o.topicPrefix.length) : topic;
  }

  /** One pass; at most one at a time (a call during a pass joins it), given up after twice the interval (at least 60 s). */
  pass(): Promise<void> {
    this.running ??= this.guardedPass().finally(() => (this.running = undefined));
    return this.running;
  }

  private async guardedPass(): Promise<void> {
    const limitMs = Math.max(60_000, 2 * this.o.intervalMs);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.measure(),
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

  private async measure(): Promise<void> {
    const lags = [];
    for (const group of this.o.groups)
      for (const l of await groupLag(this.kafka, group, { exactUpTo: 1_000 }))
        lags.push({ group, ...l, topic: this.logical(l.topic) });
    const dlqTopics = await listDlqTopics(this.kafka, this.o.topicPrefix);
    const handled = await readDlqLedger(this.kafka, this.o.codec);
    // A large DLQ is not read every pass: its offset span is counted (an upper bound).
    const dlqs = (await summarizeDlqs(this.kafka, dlqTopics, { exactUpTo: 10_000, handled })).map((d) => ({
      ...d,
      topic: this.logical(d.topic),
    }));
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
    const at = Date.now();
    m.lagScrapedAt.set(at / 1000);
    this.last = { at, lags, dlqs };
  }
}
