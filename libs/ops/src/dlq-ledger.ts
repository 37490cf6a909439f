import { hostname } from 'node:os';
import { ensureTopics, type Admin, type Kafka, type Message } from '@keyflow/kafka';
import { DecodeError, newMetadata, type EventCodec } from '@keyflow/contracts';
import { Topic, type DlqRecordHandled, type DlqTopic } from '@keyflow/schemas';
import { dlqRecordId, isOffsetText } from './dlq-headers';
import { lastStableOffsets, scanRanges } from './scan';

/** What was done to a DLQ record: REDRIVEN (re-published to its original topic) or DISCARDED. */
export type DlqAction = DlqRecordHandled['action'];

/**
 * Logical name of the DLQ ledger: a compacted topic with one DlqRecordHandled per DLQ record that was redriven or
 * discarded (the latest action wins). A DLQ topic keeps every record until retention deletes it; the ledger is
 * what says which of them still wait for an operator ("pending").
 */
export const DLQ_LEDGER_TOPIC = Topic.DLQ_HANDLED;
/** Partition count the ledger is created with (schemas/catalog.yaml names it). */
export const DLQ_LEDGER_PARTITIONS = 3;
/**
 * How long ledger entries are kept, ms (cleanup.policy=compact,delete): longer than any DLQ keeps its records (a DLQ
 * takes its topic's retention, at most 7 days in schemas/catalog.yaml), so an entry goes only after its record.
 */
export const DLQ_LEDGER_RETENTION_MS = 30 * 24 * 3_600_000;

/** Who acts, as ledger entries record it: `<tool>@<hostname>`. */
export const handledBy = (tool: string) => `${tool}@${hostname()}`;

/** What the ledger says about one DLQ record. */
export interface HandledEntry {
  action: DlqAction;
  /** Timestamp of the DLQ record the entry is about (ms since epoch): see {@link handledEntryOf}. */
  recordTimestamp: number;
  /** ms since epoch. */
  at: number;
  handledBy: string;
  originalTopic: string | null;
  reason: string | null;
}

/** The codec calls the ledger needs (an EventCodec). */
export type LedgerCodec = Pick<
  EventCodec,
  | 'physical'
  | 'logical'
  | 'topicPrefix'
  | 'replication'
  | 'registerTopics'
  | 'useTopics'
  | 'encode'
  | 'decode'
>;

/**
 * Creates the ledger topic when missing (compacted, DLQ_LEDGER_PARTITIONS partitions, the catalog's replication)
 * and registers its schema, so this process can write entries.
 * @throws SchemaRegistrationError / RegistryUnavailableError (the codec's), kafkajs admin errors
 */
export async function ensureDlqLedger(kafka: Kafka, codec: LedgerCodec, admin?: Admin): Promise<void> {
  const a = admin ?? kafka.admin();
  if (!admin) await a.connect();
  try {
    await ensureTopics(a, [
      {
        topic: codec.physical(DLQ_LEDGER_TOPIC),
        partitions: DLQ_LEDGER_PARTITIONS,
        configs: { 'cleanup.policy': 'compact,delete', 'retention.ms': String(DLQ_LEDGER_RETENTION_MS) },
        ...codec.replication(DLQ_LEDGER_TOPIC),
      },
    ]);
  } finally {
    if (!admin) await a.disconnect();
  }
  await codec.registerTopics([DLQ_LEDGER_TOPIC]);
}

/**
 * The ledger record for one DLQ record: key {@link dlqRecordId}, value a DlqRecordHandled. `dlqTopic` is the
 * physical DLQ topic; the event carries its logical name.
 */
export function ledgerMessage(
  codec: LedgerCodec,
  entry: {
    dlqTopic: string;
    partition: number;
    offset: string;
    /** The DLQ record's timestamp, ms since epoch (kafkajs gives it as a decimal string). */
    recordTimestamp: number;
    action: DlqAction;
    originalTopic?: string | null;
    handledBy: string;
    reason?: string | null;
  },
): Message & { topic: string } {
  const key = dlqRecordId(entry.dlqTopic, entry.partition, entry.offset);
  return {
    topic: codec.physical(DLQ_LEDGER_TOPIC),
    key,
    value: codec.encode(DLQ_LEDGER_TOPIC, 'DlqRecordHandled', {
      metadata: newMetadata('DlqRecordHandled', { key, correlationId: key }),
      dlqTopic: codec.logical(entry.dlqTopic) ?? entry.dlqTopic,
      partition: entry.partition,
      offset: entry.offset,
      recordTimestamp: entry.recordTimestamp,
      action: entry.action,
      originalTopic: entry.originalTopic ?? null,
      handledBy: entry.handledBy,
      reason: entry.reason ?? null,
    }),
  };
}

/**
 * Reads the whole ledger (read_committed, up to its last stable offsets) into a map from {@link dlqRecordId} to the
 * latest entry: {@link DlqLedgerView} read once (a process that reads the ledger again and again keeps a view).
 * @throws as {@link DlqLedgerView.refresh}
 */
export function readDlqLedger(kafka: Kafka, codec: LedgerCodec): Promise<ReadonlyMap<string, HandledEntry>> {
  return new DlqLedgerView(kafka, codec).refresh();
}

/** How often a {@link DlqLedgerView} reads the whole ledger again, ms: once an hour. */
export const LEDGER_WHOLE_READ_MS = 3_600_000;

/**
 * The DLQ ledger kept in memory and brought up to date by reading only what was appended since the last read: a
 * long-lived process (the orchestrator's lag passes every 30 s, its ops API) then costs the ledger's new entries a
 * read, not the ledger's whole history. The map goes from {@link dlqRecordId} to the latest entry; an entry no codec
 * decodes is left out (its DLQ record then counts as pending: a later redrive may send it again, which idempotency
 * keys make safe); a tombstone removes its key; a missing ledger topic reads as empty. The whole ledger is read again
 * once every {@link LEDGER_WHOLE_READ_MS}, and at once when a partition's end is below where the view had read (the
 * topic deleted and created again): entries that retention removed from the ledger leave the view then, and a ledger
 * topic created again that has grown past the old positions is read whole within that time.
 */
export class DlqLedgerView {
  private entries = new Map<string, HandledEntry>();
  private index = new HandledOffsets();
  /** Per ledger partition, the offset the next read starts at. */
  private positions = new Map<number, bigint>();
  /** The read going on, and the one the calls made meanwhile wait for (see {@link refresh}). */
  private reading?: Promise<ReadonlyMap<string, HandledEntry>>;
  private next?: Promise<ReadonlyMap<string, HandledEntry>>;
  /** When the view last read the whole ledger (ms since epoch). */
  private wholeAt = 0;

  constructor(
    private readonly kafka: Kafka,
    private readonly codec: LedgerCodec,
  ) {}

  /**
   * The ledger as of now: reads the entries appended since the last read (read_committed, up to the last stable
   * offsets; the whole ledger the first time). Every entry committed before the call is in the map it resolves with:
   * a call made while a read is going waits for it and shares the next read with the calls made meanwhile. The map
   * returned is the view's own and changes with later calls: read it, do not keep or change it.
   * @throws kafkajs errors, UndecodableBatchError when a ledger batch cannot be decompressed, the codec's
   *   RegistryUnavailableError / RegistryRefusedError when an entry's writer schema cannot be fetched; after a
   *   throw the next call reads from where the last complete read ended
   */
  refresh(): Promise<ReadonlyMap<string, HandledEntry>> {
    // A read in flight took its end offsets before this call: an entry committed just before it (a discard, then a
    // redrive of what is pending) may be past them. So a call waits for that read and shares the next one, which
    // every call made before it starts shares too.
    this.next ??= (this.reading ?? Promise.resolve()).then(
      () => this.startRead(),
      () => this.startRead(),
    );
    return this.next;
  }

  /**
   * The DLQ offsets of the entries the last read left in the view, per DLQ partition (see {@link HandledOffsets}):
   * kept as the view reads, never rebuilt from the entries but on a whole read.
   */
  get offsets(): HandledOffsets {
    return this.index;
  }

  private startRead(): Promise<ReadonlyMap<string, HandledEntry>> {
    this.next = undefined;
    this.reading = this.readNew().finally(() => (this.reading = undefined));
    return this.reading;
  }

  private async readNew(): Promise<ReadonlyMap<string, HandledEntry>> {
    const { kafka, codec } = this;
    const topic = codec.physical(DLQ_LEDGER_TOPIC);
    codec.useTopics([DLQ_LEDGER_TOPIC]);
    const admin = kafka.admin();
    await admin.connect();
    let ends;
    try {
      if (!(await admin.listTopics()).includes(topic)) {
        this.entries = new Map();
        this.index = new HandledOffsets();
        this.positions = new Map();
        return this.entries;
      }
      ends = await lastStableOffsets(kafka, topic, admin);
    } finally {
      await admin.disconnect();
    }
    // Read apart from the entries held, then put in: a read that throws halfway leaves the view as it was.
    let entries = this.entries;
    let index = this.index;
    let positions = this.positions;
    const whole = Date.now() - this.wholeAt >= LEDGER_WHOLE_READ_MS;
    if (whole || ends.some((e) => e.end < (positions.get(e.partition) ?? 0n))) {
      entries = new Map();
      index = new HandledOffsets();
      positions = new Map();
    }
    const startedAt = Date.now();
    const ranges = ends
      .map((e) => {
        const at = positions.get(e.partition);
        return {
          topic,
          partition: e.partition,
          from: at !== undefined && at > e.low ? at : e.low,
          to: e.end,
        };
      })
      .filter((r) => r.from < r.to);
    const read: Array<[string, HandledEntry | null]> = [];
    await scanRanges(kafka, ranges, async (_t, partition, m) => {
      const key = m.key?.toString();
      if (!key) return;
      if (!m.value) return void read.push([key, null]); // a tombstone: the entry was forgotten
      try {
        const d = await codec.decode(DLQ_LEDGER_TOPIC, m.value, { topic, partition, offset: m.offset });
        if (d.event !== 'DlqRecordHandled') return;
        const v = d.value;
        read.push([
          dlqRecordId(codec.physical(v.dlqTopic as DlqTopic), v.partition, v.offset),
          {
            action: v.action,
            recordTimestamp: v.recordTimestamp,
            at: v.metadata.occurredAt,
            handledBy: v.handledBy,
            originalTopic: v.originalTopic,
            reason: v.reason,
          },
        ]);
      } catch (err) {
        // An undecodable entry: its record stays pending (see above). Anything else (the registry) is the caller's.
        if (!(err instanceof DecodeError)) throw err;
      }
    });
    for (const [key, entry] of read) {
      if (entry) {
        if (!entries.has(key)) index.add(key);
        entries.set(key, entry);
      } else if (entries.delete(key)) index.remove(key);
    }
    for (const e of ends) positions.set(e.partition, e.end);
    if (positions !== this.positions) this.wholeAt = startedAt;
    this.entries = entries;
    this.index = index;
    this.positions = positions;
    return entries;
  }
}

/**
 * The ledger's entry for a DLQ record, if it has one that applies: same topic, partition and offset, and the same
 * record timestamp (a DLQ topic deleted and created again starts its offsets at 0: its new records are not the ones
 * the older entries name).
 */
export function handledEntryOf(
  handled: ReadonlyMap<string, HandledEntry> | undefined,
  physicalDlqTopic: string,
  partition: number,
  m: { offset: string; timestamp: string },
): HandledEntry | undefined {
  const e = handled?.get(dlqRecordId(physicalDlqTopic, partition, m.offset));
  return e && e.recordTimestamp === Number(m.timestamp) ? e : undefined;
}

/**
 * The DLQ offsets the ledger names, per DLQ partition: {@link countIn} says how many entries name offsets in a range
 * of one DLQ partition, by binary search instead of a walk over every entry. A {@link DlqLedgerView} keeps one up to
 * date as it reads, so the orchestrator's lag passes (every 30 s) do not walk a ledger of up to 30 days of entries
 * once per large DLQ partition on its event loop. Offsets are kept as numbers (exact up to 2^53).
 */
export class HandledOffsets {
  /**
   * `<physical DLQ topic>/<partition>` -> its offsets: appended as they come, sorted (and made unique) when next
   * asked for, so a build of n entries costs one sort, O(n log n), in whatever order they come. A whole read
   * delivers one DLQ partition's entries as several sorted streams mixed (the ledger has 3 partitions, keyed by
   * record id): inserting each in place was O(n) a step there.
   */
  private readonly byPartition = new Map<string, { offsets: number[]; sorted: boolean }>();

  /** The index of every key of `handled` (one pass, one sort per DLQ partition when first counted). */
  static of(handled: ReadonlyMap<string, unknown>): HandledOffsets {
    const index = new HandledOffsets();
    for (const id of handled.keys()) index.add(id);
    return index;
  }

  /** Adds a {@link dlqRecordId}'s offset (once: adding an id twice keeps one). An id of another shape is ignored. */
  add(id: string): void {
    const at = parseRecordId(id);
    if (!at) return;
    let p = this.byPartition.get(at.partitionKey);
    if (!p) this.byPartition.set(at.partitionKey, (p = { offsets: [], sorted: true }));
    const xs = p.offsets;
    if (p.sorted && xs.length > 0 && xs[xs.length - 1] >= at.offset) {
      if (xs[xs.length - 1] === at.offset) return;
      p.sorted = false;
    }
    xs.push(at.offset);
  }

  /** Removes a {@link dlqRecordId}'s offset (a tombstone); an id not held is ignored. */
  remove(id: string): void {
    const at = parseRecordId(id);
    const p = at && this.byPartition.get(at.partitionKey);
    if (!at || !p) return;
    const xs = sortedOffsets(p);
    const i = lowerBound(xs, at.offset);
    if (xs[i] !== at.offset) return;
    xs.splice(i, 1);
    if (xs.length === 0) this.byPartition.delete(at.partitionKey);
  }

  /**
   * How many ledger entries name offsets in [low, end) of `partition` of `physicalDlqTopic`: what is subtracted from
   * the offset span of a DLQ partition too large to read (the entries' timestamps are not checked against records
   * there, so it is an estimate).
   */
  countIn(physicalDlqTopic: string, partition: number, low: bigint, end: bigint): number {
    const p = this.byPartition.get(`${physicalDlqTopic}/${partition}`);
    if (!p || end <= low) return 0;
    const xs = sortedOffsets(p);
    return lowerBound(xs, Number(end)) - lowerBound(xs, Number(low));
  }
}

/** A partition's offsets sorted ascending and each once (sorted in place, the first time after appends out of order). */
function sortedOffsets(p: { offsets: number[]; sorted: boolean }): number[] {
  const xs = p.offsets;
  if (p.sorted) return xs;
  xs.sort((a, b) => a - b);
  let w = 0;
  for (let r = 0; r < xs.length; r++) if (w === 0 || xs[r] !== xs[w - 1]) xs[w++] = xs[r];
  xs.length = w;
  p.sorted = true;
  return xs;
}

/**
 * A {@link dlqRecordId} split: `<topic>/<partition>` and the offset (topic names have no `/`), or undefined when the
 * offset is not a Kafka offset's decimal text (`05`, `5.0`, ` 5` and the empty text would all be 5 to `Number`: two
 * ids would then share one offset, and removing either would drop it).
 */
function parseRecordId(id: string): { partitionKey: string; offset: number } | undefined {
  const cut = id.lastIndexOf('/');
  if (cut <= 0) return undefined;
  const text = id.slice(cut + 1);
  if (!isOffsetText(text)) return undefined;
  const offset = Number(text);
  if (!Number.isSafeInteger(offset)) return undefined;
  return { partitionKey: id.slice(0, cut), offset };
}

/** The first index of the ascending `xs` whose value is >= `x` (xs.length when none). */
function lowerBound(xs: readonly number[], x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (xs[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
