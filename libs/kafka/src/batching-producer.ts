import type { Message, Producer } from 'kafkajs';

/**
 * Coalesces concurrent sends into one produce request (like the Java producer's linger.ms): callers await their
 * own message's acknowledgement, and the messages of one flush go out in one `sendBatch` with acks=all.
 * An idempotent producer allows one request in flight per connection, so without this, concurrent sends queue
 * one round trip each. Order per topic-partition is the order of `send` calls.
 */
export class BatchingProducer {
  private pending: Array<{
    topic: string;
    message: Message;
    resolve: () => void;
    reject: (e: unknown) => void;
  }> = [];
  private timer?: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();

  /**
   * @param lingerMs how long a send waits for company before its batch is flushed, in ms (default 2).
   * @param maxBatch flush at once when this many messages wait (default 500).
   */
  constructor(
    private readonly producer: Producer,
    private readonly lingerMs = 2,
    private readonly maxBatch = 500,
  ) {}

  /** Resolves once the message is acknowledged by all in-sync replicas (acks=all). */
  send(topic: string, message: Message): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push({ topic, message, resolve, reject });
      if (this.pending.length >= this.maxBatch) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), this.lingerMs);
    });
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    this.flushing = this.flushing.then(async () => {
      const byTopic = new Map<string, Message[]>();
      for (const b of batch) {
        const messages = byTopic.get(b.topic);
        if (messages) messages.push(b.message);
        else byTopic.set(b.topic, [b.message]);
      }
      try {
        await this.producer.sendBatch({
          acks: -1,
          topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })),
        });
        batch.forEach((b) => b.resolve());
      } catch (e) {
        batch.forEach((b) => b.reject(e));
      }
    });
  }
}
