import type { Kafka } from 'kafkajs';
import { groupLag, listDlqTopics, summarizeDlqs } from '@keyflow/kafka';
import type { Logger } from '@keyflow/observability';
import type { OrchestratorMetrics } from './metrics';

/**
 * Sets the lag metrics (consumer_lag_records, consumer_oldest_unread_age_seconds, dlq_records) every `intervalMs`:
 * per group of `groups`, topic and partition, the records still to read as a read_committed consumer counts them
 * (libs/kafka groupLag: transaction markers and aborted records are not lag), and the records of every DLQ topic
 * under the topic prefix. Topics are labelled by logical name. A pass that fails is logged and the previous figures
 * stay (consumer_lag_scraped_at_seconds says how old they are).
 */
export class LagMonitor {
  private timer?: NodeJS.Timeout;
  private running = false;

  constructor(
    private readonly kafka: Kafka,
    private readonly metrics: OrchestratorMetrics,
    private readonly logger: Logger,
    private readonly o: { groups: string[]; topicPrefix: string; intervalMs: number },
  ) {}

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

  /** One pass; at most one at a time, and given up after twice the interval (at least 60 s). */
  async pass(): Promise<void> {
    if (this.running) return;
    this.running = true;
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
      this.running = false;
    }
  }

  private async measure(): Promise<void> {
    const lags = [];
    for (const group of this.o.groups)
      for (const l of await groupLag(this.kafka, group, { exactUpTo: 1_000 })) lags.push({ group, ...l });
    const dlqTopics = await listDlqTopics(this.kafka, this.o.topicPrefix);
    // A large DLQ is not read every pass: its offset span is counted (an upper bound).
    const dlqs = await summarizeDlqs(this.kafka, dlqTopics, { exactUpTo: 10_000 });
    const m = this.metrics;
    m.consumerLag.reset();
    m.oldestUnread.reset();
    m.dlqRecords.reset();
    for (const l of lags) {
      const labels = { group: l.group, topic: this.logical(l.topic), partition: String(l.partition) };
      m.consumerLag.set(labels, l.lag);
      m.oldestUnread.set(labels, (l.oldestAgeMs ?? 0) / 1000);
    }
    for (const d of dlqs) m.dlqRecords.set({ topic: this.logical(d.topic) }, d.records);
    m.lagScrapedAt.set(Date.now() / 1000);
  }
}
