import type { Message, Producer } from 'kafkajs';

/**
 * Coalesces concurrent sends into one produce request (like the Java producer's linger.ms): callers await their
 * own message's acknowledgement, and the messages of one request go out in one `sendBatch` with acks=all.
 * An idempotent producer allows one request in flight per connection, so without this, concurrent sends queue
 * one round trip each. Order per topic-partition is the order of `send` calls.
 *
 * Adaptive: one request is in flight at a time, and the next one takes every message that arrived meanwhile (at
 * most `maxBatch`), so under load requests grow with the load while a lone message waits only for the end of the
 * current event-loop turn (with the default linger of 0) plus any request already in flight.
 */
export class BatchingProducer {
  private pending: Array<{
    topic: string;
    message: Message;
    resolve: () => void;
    reject: (e: unknown) => void;
  }> = [];
  private scheduled = false;
  private inFlight = false;

  /**
   * @param lingerMs how long a send waits for company before a request is made when none is in flight, in ms
   *   (default 0: the end of the current event-loop turn, so sends made in one turn share a request).
   * @param maxBatch most messages in one request (default 500); more wait for the next.
   */
  constructor(
    private readonly producer: Producer,
    private readonly lingerMs = 0,
    private readonly maxBatch = 500,
  ) {}

  /** Resolves once the message is acknowledged by all in-sync replicas (acks=all). */
  send(topic: string, message: Message): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push({ topic, message, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight || this.pending.length === 0) return;
    this.scheduled = true;
    const go = () => {
      this.scheduled = false;
      void this.flush();
    };
    if (this.lingerMs > 0) setTimeout(go, this.lingerMs);
    else setImmediate(go);
  }

  private async flush(): Promise<void> {
    if (this.inFlight || this.pending.length === 0) return;
    this.inFlight = true;
    const batch = this.pending.splice(0, this.maxBatch);
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
    } finally {
      this.inFlight = false;
      // What arrived meanwhile goes at once: it has waited for this request already.
      if (this.pending.length > 0) void this.flush();
    }
  }
}
