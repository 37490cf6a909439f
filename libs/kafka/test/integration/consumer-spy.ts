import type { Kafka } from 'kafkajs';

/** What {@link kafkaWith} does to each consumer the ordered consumer creates. */
export interface ConsumerSpy {
  /** Called with each OffsetCommit's offsets before it is sent; the commit waits for what it returns. */
  onCommit?: (offsets: Array<{ offset: string }>) => Promise<void> | void;
  /** Called with each consumer when it is created (to listen to its instrumentation events). */
  onConsumer?: (consumer: ReturnType<Kafka['consumer']>) => void;
}

/**
 * `kafka` whose consumers go through `spy` first (each OffsetCommit through `onCommit`, which may hold it, when
 * given), as the ordered consumer creates them. Producers and admins are `kafka`'s own.
 */
export function kafkaWith(kafka: Kafka, spy: ConsumerSpy): Kafka {
  const decorated = Object.create(kafka) as Kafka;
  decorated.consumer = (config) => {
    const consumer = kafka.consumer(config);
    spy.onConsumer?.(consumer);
    const { onCommit } = spy;
    if (onCommit) {
      const commit = consumer.commitOffsets.bind(consumer);
      consumer.commitOffsets = async (offsets) => {
        await onCommit(offsets);
        return commit(offsets);
      };
    }
    return consumer;
  };
  return decorated;
}

/**
 * `kafka` whose consumers push the time (ms since the epoch) each Fetch request is sent into `times` (kafkajs's
 * REQUEST instrumentation event).
 */
export function kafkaTimingFetches(kafka: Kafka, times: number[]): Kafka {
  return kafkaWith(kafka, {
    onConsumer: (consumer) =>
      consumer.on(consumer.events.REQUEST, (e) => {
        if (e.payload.apiName === 'Fetch') times.push(Date.now());
      }),
  });
}

/** The gaps in ms between consecutive times of `times` from index `from` on (one fewer than those times). */
export function gapsFrom(times: number[], from: number): number[] {
  return times.slice(from + 1).map((t, i) => t - times[from + i]);
}
