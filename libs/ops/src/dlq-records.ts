import type { Kafka, KafkaMessage } from '@keyflow/kafka';
import type { EventCodec } from '@keyflow/contracts';
import type { LogicalTopic } from '@keyflow/schemas';
import { PII_MASK } from '@keyflow/workflow';
import { DLQ_HEADERS, header } from './dlq-headers';
import { matchesRedriveFilter, rangesFor, type RedriveFilter } from './redrive';
import { handledEntryOf, type HandledEntry } from './dlq-ledger';
import { lastStableOffsets, scanRanges } from './scan';

/** A DLQ record as operators see it: triage headers, key, the decoded value and what the ledger says of it. */
export interface DlqRecord {
  partition: number;
  offset: string;
  key: string | null;
  originalTopic: string | null;
  originalPartition: number | null;
  originalOffset: string | null;
  errorClass: string | null;
  errorMessage: string | null;
  /** The error's code (x-dlq-error-code), or null when it had none. */
  errorCode: string | null;
  attempts: number | null;
  /** ms since epoch */
  firstFailureAt: number | null;
  /** ms since epoch */
  lastFailureAt: number | null;
  consumerGroup: string | null;
  host: string | null;
  redriveCount: number;
  /**
   * On a stand-in (x-dlq-omitted): what was left out and why (no request could carry the original; it stays at its
   * original topic, partition and offset until its retention ends); null on a record that carries its original.
   */
  omitted: string | null;
  /**
   * The decoded event (`{ event, value }`) read with its original topic's schema; `{ undecodable, text }` when no
   * schema decodes it; the bytes as UTF-8 text when no codec was given.
   */
  value: unknown;
  /** The ledger's latest entry for it (redriven or discarded), or null while it is pending. */
  handled: HandledEntry | null;
}

/** What the DLQ views need of the codec (read only). */
type DlqCodec = Pick<EventCodec, 'useTopics' | 'decode' | 'logical' | 'maskPii' | 'marksPii'>;

/** Longest text shown for a value no schema decodes, in characters. */
const UNDECODABLE_TEXT_CHARS = 2_000;

/**
 * Describes one DLQ record. `codec` (read only: `useTopics`) decodes the value with the schema of its original topic
 * (the `x-dlq-original-topic` header, a physical name of the codec's prefix). Values the topic's Avro schema marks
 * `"pii": true`, in the reader's schema or in the writer's the record names, are masked (`EventCodec.maskPii`); the
 * text of a value that does not decode is not shown where either schema marks anything.
 */
export async function describeDlqRecord(
  m: KafkaMessage,
  at: { topic: string; partition: number },
  o: {
    codec?: DlqCodec;
    handled?: ReadonlyMap<string, HandledEntry>;
  },
): Promise<DlqRecord> {
  const h = (n: string) => header(m.headers, n) ?? null;
  const num = (v: string | null) => (v === null ? null : Number(v));
  const original = h(DLQ_HEADERS.originalTopic);
  const codec = o.codec;
  // Any name: decode throws for a topic the catalog lacks, and the record shows as undecodable.
  const logical = (original ? codec?.logical(original) : undefined) as LogicalTopic | undefined;
  let value: unknown = m.value?.toString('utf8') ?? null;
  if (codec && logical && m.value)
    value = await Promise.resolve()
      .then(() => codec.useTopics([logical]))
      .then(() => codec.decode(logical, m.value, { ...at, offset: m.offset }))
      // Marked in this reader's schema or in the producer's (the writer schema the record names).
      .then((d) => ({ event: d.event, value: codec.maskPii(logical, d) }))
      .catch((err: Error) => ({
        undecodable: err.message,
        text: codec.marksPii(logical, m.value)
          ? PII_MASK
          : m.value!.toString('utf8').slice(0, UNDECODABLE_TEXT_CHARS),
      }));
  return {
    partition: at.partition,
    offset: m.offset,
    key: m.key?.toString() ?? null,
    originalTopic: original,
    originalPartition: num(h(DLQ_HEADERS.originalPartition)),
    originalOffset: h(DLQ_HEADERS.originalOffset),
    errorClass: h(DLQ_HEADERS.errorClass),
    errorMessage: h(DLQ_HEADERS.errorMessage),
    errorCode: h(DLQ_HEADERS.errorCode) ?? null,
    attempts: num(h(DLQ_HEADERS.attempts)),
    firstFailureAt: num(h(DLQ_HEADERS.firstFailureAt)),
    lastFailureAt: num(h(DLQ_HEADERS.lastFailureAt)),
    consumerGroup: h(DLQ_HEADERS.consumerGroup),
    host: h(DLQ_HEADERS.host),
    redriveCount: Number(h(DLQ_HEADERS.redriveCount) ?? 0),
    omitted: h(DLQ_HEADERS.omitted),
    value,
    handled: handledEntryOf(o.handled, at.topic, at.partition, m) ?? null,
  };
}

/**
 * Up to `limit` records of one DLQ topic (physical name) that match `filter`, in offset order per partition, read
 * read_committed up to the last stable offsets (only the partition and offset the filter names, {@link rangesFor}); with `pendingOnly`, those the ledger (`handled`) does not name.
 * @throws kafkajs errors; UndecodableBatchError when a record batch cannot be decompressed
 */
export async function readDlqRecords(
  kafka: Kafka,
  dlqTopic: string,
  o: {
    limit: number;
    filter?: RedriveFilter;
    pendingOnly?: boolean;
    codec?: DlqCodec;
    handled?: ReadonlyMap<string, HandledEntry>;
  },
): Promise<DlqRecord[]> {
  const ranges = rangesFor(dlqTopic, await lastStableOffsets(kafka, dlqTopic), o.filter ?? {});
  const found: DlqRecord[] = [];
  await scanRanges(kafka, ranges, async (topic, partition, m) => {
    if (found.length >= o.limit) return false;
    if (!matchesRedriveFilter(m, o.filter ?? {}, partition)) return;
    if (o.pendingOnly && handledEntryOf(o.handled, topic, partition, m)) return;
    found.push(await describeDlqRecord(m, { topic, partition }, o));
  });
  return found.sort((a, b) => a.partition - b.partition || Number(BigInt(a.offset) - BigInt(b.offset)));
}
