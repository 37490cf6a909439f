import { Topic } from '@keyflow/schemas';
import { ensureTopics, keyPartition, type Admin, type Kafka } from '@keyflow/kafka';
import { newMetadata, type EventCodec } from '@keyflow/contracts';
import { lastStableOffsets, scanRanges } from '@keyflow/ops';
import type { Logger } from '@keyflow/observability';
import type { Mark } from './source-partition';

/**
 * The topic triggers' progress marks: wf.trigger-progress, compacted, one TriggerProgress per (group, topic,
 * partition) a trigger reads, written in the transaction of the records it applies (schemas/catalog.yaml).
 */
export const TRIGGER_PROGRESS_TOPIC = Topic.WF_TRIGGER_PROGRESS;
/** Partition count the progress topic is created with (schemas/catalog.yaml names it). */
export const TRIGGER_PROGRESS_PARTITIONS = 3;
/**
 * Segment roll of the progress topic, ms: compaction cleans closed segments only (Kafka docs "Log Compaction"), so a
 * short roll keeps what an assignment reads (every mark since the last compaction) small.
 */
const PROGRESS_SEGMENT_MS = 600_000;

/** The key of a partition's mark: `<group>/<topic>/<partition>`. */
export const markKey = (group: string, topic: string, partition: number) => `${group}/${topic}/${partition}`;

/**
 * Creates the progress topic when missing (compacted, short segments) and registers its schema.
 * @throws kafkajs admin errors; SchemaRegistrationError / RegistryUnavailableError (the codec's)
 */
export async function ensureProgressTopic(admin: Admin, codec: EventCodec): Promise<void> {
  await ensureTopics(admin, [
    {
      topic: codec.physical(TRIGGER_PROGRESS_TOPIC),
      partitions: TRIGGER_PROGRESS_PARTITIONS,
      configs: {
        'cleanup.policy': 'compact',
        'segment.ms': String(PROGRESS_SEGMENT_MS),
        'min.cleanable.dirty.ratio': '0.1',
      },
      ...codec.replication(TRIGGER_PROGRESS_TOPIC),
    },
  ]);
  await codec.registerTopics([TRIGGER_PROGRESS_TOPIC]);
}

/** The mark record of one partition, for the transaction that applies its records. */
export function markMessage(
  codec: EventCodec,
  at: { trigger: string; group: string; topic: string; partition: number },
  mark: Mark,
): { topic: string; key: string; value: Buffer } {
  const key = markKey(at.group, at.topic, at.partition);
  return {
    topic: codec.physical(TRIGGER_PROGRESS_TOPIC),
    key,
    value: codec.encode(TRIGGER_PROGRESS_TOPIC, 'TriggerProgress', {
      metadata: newMetadata('TriggerProgress', { key, correlationId: key }),
      trigger: at.trigger,
      group: at.group,
      topic: at.topic,
      partition: at.partition,
      next: mark.next.toString(),
      through: mark.through.toString(),
      held: mark.held.map(String),
      requests: (mark.requests ?? []).map((r) => ({ partition: r.partition, offset: r.offset.toString() })),
    }),
  };
}

/**
 * The last committed marks of `partitions` of `topic` read as `group` (read_committed, to the progress topic's last
 * stable offsets): reads only the progress partitions those keys hash to. A mark that does not decode is logged and
 * passed over (the partition then starts from the group's committed offset; the engine's run id de-duplication
 * covers a replay of what it applied).
 * @throws kafkajs errors; UndecodableBatchError
 */
export async function readMarks(
  kafka: Kafka,
  codec: EventCodec,
  logger: Logger,
  at: { group: string; topic: string; partitions: number[] },
): Promise<Map<number, Mark>> {
  const physical = codec.physical(TRIGGER_PROGRESS_TOPIC);
  const wanted = new Map(at.partitions.map((p) => [markKey(at.group, at.topic, p), p]));
  const progressPartitions = new Set(
    [...wanted.keys()].map((k) => keyPartition(k, TRIGGER_PROGRESS_PARTITIONS)),
  );
  const ends = (await lastStableOffsets(kafka, physical)).filter((e) => progressPartitions.has(e.partition));
  const marks = new Map<number, Mark>();
  await scanRanges(
    kafka,
    ends.map((e) => ({ topic: physical, partition: e.partition, from: e.low, to: e.end })),
    async (_t, partition, m) => {
      const source = m.key ? wanted.get(m.key.toString()) : undefined;
      if (source === undefined) return;
      if (m.value === null) return void marks.delete(source);
      try {
        const d = await codec.decode(TRIGGER_PROGRESS_TOPIC, m.value, {
          topic: physical,
          partition,
          offset: m.offset,
        });
        if (d.event !== 'TriggerProgress') return;
        const v = d.value;
        marks.set(source, {
          next: BigInt(v.next),
          through: BigInt(v.through),
          held: v.held.map((o) => BigInt(o)),
        });
      } catch (err) {
        logger.error(
          { err, partition, offset: m.offset },
          'a trigger progress mark could not be read; passed over',
        );
      }
    },
    { groupPrefix: 'keyflow-trigger-progress' },
  );
  return marks;
}
