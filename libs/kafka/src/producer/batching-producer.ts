import { CompressionTypes, type Message, type Producer } from 'kafkajs';
import { writeCompression } from './write-compression';
import { BATCHING_DEFAULTS, type BatchingProducerOptions } from './options';
import type { SizedMessage } from './types';

/** Settles a group of messages sent together: resolved when the last is acknowledged, rejected on the first failure. */
interface Group {
  left: number;
  resolve: () => void;
  reject: (e: unknown) => void;
}

/** Bytes of a string or Buffer as Kafka stores it (UTF-8 for strings). */
const bytesOf = (v: string | Buffer): number => (typeof v === 'string' ? Buffer.byteLength(v) : v.length);

/**
 * Per-record overhead in a record batch, in bytes, counted generously: the record's length, attributes, timestamp
 * and offset deltas and the key, value and header lengths are varints (Kafka protocol, "Record" in the message
 * format docs), plus a share of the batch header (61 bytes).
 */
const RECORD_OVERHEAD_BYTES = 64;

/**
 * The bytes a message adds to a produce request, at least: key, value, every header (a header with an array value
 * is one header per element, its key repeated, as kafkajs writes it) and the record's overhead. What a size bound
 * on requests counts (the broker's message.max.bytes limits a partition's record batch).
 */
export function messageBytes(m: SizedMessage): number {
  let n = RECORD_OVERHEAD_BYTES;
  if (m.key != null) n += bytesOf(m.key);
  if (m.value != null) n += bytesOf(m.value);
  if (m.headers)
    for (const [k, v] of Object.entries(m.headers)) {
      if (v === undefined) continue; // kafkajs writes no header for undefined, one with a null value for null
      for (const one of Array.isArray(v) ? v : [v])
        n += Buffer.byteLength(k) + (one == null ? 0 : bytesOf(one)) + 8;
    }
  return n;
}

/**
 * Coalesces concurrent sends into one produce request (like the Java producer's linger.ms): callers await their
 * own messages' acknowledgement, and the messages of one request go out in one `sendBatch` with acks=all.
 * An idempotent producer allows one request in flight per connection, so without this, concurrent sends queue
 * one round trip each. Order per topic-partition is the order of `send` calls.
 *
 * Adaptive: one request is in flight at a time, and the next one takes every message that arrived meanwhile (at
 * most `maxBatch` messages and `maxBytes` bytes), so under load requests grow with the load while a lone message
 * waits only for the end of the current event-loop turn (with the default linger of 0) plus any request already in
 * flight. The byte bound keeps each partition's record batch under the broker's message.max.bytes (Kafka docs,
 * broker config `message.max.bytes`: the largest record batch it accepts; kafkajs does not split one): messages that
 * each fit but together would not go in separate requests. A message larger than `maxBytes` goes alone.
 * Requests are compressed with KEYFLOW_COMPRESSION's codec (./write-compression), uncompressed when it is unset.
 */
export class BatchingProducer {
  private pending: Array<{ topic: string; message: Message; bytes: number; group: Group }> = [];
  private scheduled = false;
  private inFlight = false;

  private readonly lingerMs: number;
  private readonly maxBatch: number;
  private readonly maxBytes: number;

  /**
   * @param opts see {@link BatchingProducerOptions} (defaults: {@link BATCHING_DEFAULTS}).
   * @throws RangeError when maxBatch is not an integer >= 1 or maxBytes not a number >= 1.
   */
  constructor(
    private readonly producer: Producer,
    opts: BatchingProducerOptions = {},
  ) {
    const {
      lingerMs = BATCHING_DEFAULTS.lingerMs,
      maxBatch = BATCHING_DEFAULTS.maxBatch,
      maxBytes = BATCHING_DEFAULTS.maxBytes,
    } = opts;
    if (!Number.isInteger(maxBatch) || maxBatch < 1)
      throw new RangeError(`BatchingProducer maxBatch must be an integer >= 1, got ${maxBatch}`);
    if (!Number.isFinite(maxBytes) || maxBytes < 1)
      throw new RangeError(`BatchingProducer maxBytes must be a number >= 1, got ${maxBytes}`);
    [this.lingerMs, this.maxBatch, this.maxBytes] = [lingerMs, maxBatch, maxBytes];
  }

  /** Resolves once the message is acknowledged by all in-sync replicas (acks=all). */
  send(topic: string, message: Message): Promise<void> {
    return this.sendAll(topic, [message]);
  }

  /**
   * Sends `messages` to `topic` in order, in as many requests as the bounds need; resolves once every one is
   * acknowledged (acks=all), rejects with the first failure (then the group's messages not sent yet are dropped, so
   * sending the group again keeps its order). A request refused for one partition may have written its other
   * partitions' messages: sending the group again repeats those (at least once; readers dedupe by event id). One
   * promise for all: cheaper than a `send` each.
   */
  sendAll(topic: string, messages: Message[]): Promise<void> {
    if (messages.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const group: Group = { left: messages.length, resolve, reject };
      for (const message of messages)
        this.pending.push({ topic, message, bytes: messageBytes(message), group });
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
    let n = 0;
    let bytes = 0;
    while (n < this.pending.length && n < this.maxBatch) {
      const next = this.pending[n].bytes;
      if (n > 0 && bytes + next > this.maxBytes) break;
      bytes += next;
      n++;
    }
    const batch = this.pending.splice(0, n);
    const byTopic = new Map<string, Message[]>();
    for (const b of batch) {
      const messages = byTopic.get(b.topic);
      if (messages) messages.push(b.message);
      else byTopic.set(b.topic, [b.message]);
    }
    try {
      await this.producer.sendBatch({
        acks: -1,
        compression: writeCompression(CompressionTypes.None),
        topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })),
      });
      for (const b of batch) if (--b.group.left === 0) b.group.resolve();
    } catch (e) {
      const failed = new Set(batch.map((b) => b.group));
      for (const g of failed) g.reject(e);
      // The failed groups' messages still waiting are dropped: their callers see the failure and send them again,
      // so sending them as well would put the group's messages out of order and twice.
      this.pending = this.pending.filter((p) => !failed.has(p.group));
    } finally {
      this.inFlight = false;
      // What arrived meanwhile goes at once: it has waited for this request already.
      if (this.pending.length > 0) void this.flush();
    }
  }
}
