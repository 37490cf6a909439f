import type { EventCodec } from '@keyflow/contracts';
import type { BatchingProducer } from '@keyflow/kafka';
import type { EventName, EventsByName, FixedTopic } from '@keyflow/schemas';

/**
 * Lets task handlers publish domain events (e.g. CityEnriched) on catalogued topics, through the worker's codec
 * and batching idempotent producer. Filled in when the transport starts; handlers call it while handling.
 */
export class EventPublisher {
  private codec?: EventCodec;
  private producer?: BatchingProducer;
  private ensure?: (logicalTopic: FixedTopic) => Promise<void>;
  private readonly ready = new Map<string, Promise<void>>();

  attach(
    codec: EventCodec,
    producer: BatchingProducer,
    ensureTopic: (logicalTopic: FixedTopic) => Promise<void>,
  ): void {
    [this.codec, this.producer, this.ensure] = [codec, producer, ensureTopic];
  }

  /** Publishes events (acks=all) and resolves when all are acknowledged. Registers the topic's schema on first use. */
  async publish<E extends EventName>(
    logicalTopic: FixedTopic,
    event: E,
    items: Array<{ key: string; value: EventsByName[E] }>,
  ): Promise<void> {
    if (!this.codec || !this.producer || !this.ensure)
      throw new Error('EventPublisher used before the worker transport started');
    let r = this.ready.get(logicalTopic);
    if (!r) {
      r = this.ensure(logicalTopic).then(() =>
        this.codec!.registerTopics([logicalTopic]).then(() => undefined),
      );
      this.ready.set(logicalTopic, r);
      r.catch(() => this.ready.delete(logicalTopic));
    }
    await r;
    const codec = this.codec;
    await this.producer.sendAll(
      codec.physical(logicalTopic),
      items.map((i) => ({ key: i.key, value: codec.encode(logicalTopic, event, i.value) })),
    );
  }
}
