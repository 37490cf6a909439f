import { connect, type Socket } from 'node:net';
import type { Kafka } from 'kafkajs';

// kafkajs's own protocol pieces (CommonJS, no types): its encoder and decoder, and the record batch (magic 2) a
// transactional produce carries; the requests and their framing below are this file's.
/* eslint-disable @typescript-eslint/no-require-imports */
const Encoder = require('kafkajs/src/protocol/encoder') as EncoderClass;
const Decoder = require('kafkajs/src/protocol/decoder') as DecoderClass;
const { RecordBatch } = require('kafkajs/src/protocol/recordBatch/v0') as {
  RecordBatch: (o: Record<string, unknown>) => Promise<EncoderLike>;
};
const Record = require('kafkajs/src/protocol/recordBatch/record/v0') as (
  o: Record<string, unknown>,
) => EncoderLike;
const Long = require('kafkajs/src/utils/long') as { fromInt(v: number): LongLike };
/* eslint-enable @typescript-eslint/no-require-imports */

type LongLike = { toString(): string };
type EncoderLike = { buffer: Buffer; size(): number };
interface EncoderInstance extends EncoderLike {
  writeInt8(v: number): EncoderInstance;
  writeInt16(v: number): EncoderInstance;
  writeInt32(v: number): EncoderInstance;
  writeInt64(v: LongLike | string | number): EncoderInstance;
  writeBoolean(v: boolean): EncoderInstance;
  writeString(v: string | null): EncoderInstance;
  writeUVarInt(v: number): EncoderInstance;
  writeUVarIntString(v: string | null): EncoderInstance;
  writeUVarIntBytes(v: Buffer): EncoderInstance;
  writeEncoder(v: EncoderLike): EncoderInstance;
}
type EncoderClass = new () => EncoderInstance;
interface DecoderInstance {
  readInt8(): number;
  readInt16(): number;
  readInt32(): number;
  readInt64(): LongLike;
  readBoolean(): boolean;
  readUVarInt(): number;
  readUVarIntString(): string | null;
  readTaggedFields(): unknown;
}
type DecoderClass = new (b: Buffer) => DecoderInstance;

/**
 * A transactional producer that speaks Kafka's transaction protocol version 2 (KIP-890 part 2; the cluster must have
 * `transaction.version` 2 finalized: `kafka-features.sh describe`), for `bench:transaction --v2` only: not used by
 * keyflow's services. With version 2, a transaction's partitions are added by the Produce request itself (v12) and
 * the offsets' partition by TxnOffsetCommit (v5): no AddPartitionsToTxn and no AddOffsetsToTxn, two requests and two
 * round trips fewer than kafkajs's protocol (version 1). EndTxn (v5) bumps the producer epoch, which the next
 * transaction uses (its sequences start again at 0). One partition leader, one transaction coordinator and one group
 * coordinator, found once (FindCoordinator v3, the topic's metadata through kafkajs's admin). A request refused for
 * a moment is sent again after `retryMs` (fixed, where kafkajs backs off exponentially with jitter): CONCURRENT_TRANSACTIONS
 * (the previous transaction still completing), a coordinator loading or not yet there, and on a Produce
 * NOT_ENOUGH_REPLICAS (the form a partition leader gives those coordinator errors). EndTxn must bump the epoch, or the
 * producer throws: figures of the old protocol are never taken for version 2's. Its sockets keep Nagle's algorithm on,
 * as kafkajs's do. Request and response layouts: the Kafka protocol guide (kafka.apache.org/protocol),
 * ProduceRequest v12, TxnOffsetCommitRequest v5, EndTxnRequest v5, InitProducerIdRequest v5 (flexible versions,
 * KIP-482: compact strings and arrays, tagged fields, request header v2, response header v1).
 */
export class TransactionV2Producer {
  private producerId: LongLike = Long.fromInt(-1);
  private epoch = -1;
  private sequence = 0;
  /** Requests sent again after a refusal (see {@link RETRIED}). */
  retries = 0;

  private constructor(
    private readonly transactionalId: string,
    private readonly leader: Connection,
    private readonly txnCoordinator: Connection,
    private readonly groupCoordinator: Connection,
    private readonly retryMs: number,
  ) {}

  /**
   * Connects to `topic`'s partition 0 leader and the coordinators of `transactionalId` and `groupId`, and takes a
   * producer id and epoch (InitProducerId).
   * @throws KafkaProtocolError when a broker answers with an error code (other than the retried ones above).
   */
  static async create(o: {
    kafka: Kafka;
    transactionalId: string;
    topic: string;
    groupId: string;
    retryMs: number;
  }): Promise<TransactionV2Producer> {
    const admin = o.kafka.admin();
    await admin.connect();
    const cluster = await admin.describeCluster();
    const [meta] = (await admin.fetchTopicMetadata({ topics: [o.topic] })).topics;
    await admin.disconnect();
    const nodes = new Map(cluster.brokers.map((b) => [b.nodeId, b]));
    const leaderNode = nodes.get(meta.partitions.find((p) => p.partitionId === 0)!.leader)!;
    const pool = new Map<string, Connection>();
    const at = async (host: string, port: number) => {
      const key = `${host}:${port}`;
      if (!pool.has(key)) pool.set(key, await Connection.open(host, port));
      return pool.get(key)!;
    };
    const bootstrap = await at(leaderNode.host, leaderNode.port);
    const coordinator = async (key: string, keyType: number) => {
      const found = await untilAccepted('FindCoordinator', RETRIED.coordinator, o.retryMs, async () => {
        const d = await bootstrap.request(10, 3, (e) =>
          e.writeUVarIntString(key).writeInt8(keyType).writeUVarInt(0),
        );
        d.readInt32(); // throttle_time_ms
        const error = d.readInt16();
        d.readUVarIntString(); // error_message
        d.readInt32(); // node_id
        return { error, host: d.readUVarIntString()!, port: d.readInt32() };
      });
      return at(found.host, found.port);
    };
    const p = new TransactionV2Producer(
      o.transactionalId,
      bootstrap,
      await coordinator(o.transactionalId, 1),
      await coordinator(o.groupId, 0),
      o.retryMs,
    );
    await p.init();
    return p;
  }

  private async init(): Promise<void> {
    const d = await this.untilAccepted('InitProducerId', RETRIED.transaction, async () =>
      producerIdAnswer(
        await this.txnCoordinator.request(22, 5, (e) =>
          e
            .writeUVarIntString(this.transactionalId)
            .writeInt32(60_000) // transaction_timeout_ms
            .writeInt64(Long.fromInt(-1))
            .writeInt16(-1)
            .writeUVarInt(0),
        ),
      ),
    );
    this.producerId = d.producerId;
    this.epoch = d.epoch;
  }

  /**
   * One transaction: `value` as one record on partition 0 of `topic`, `offset` committed for `groupId` on the same
   * partition, then EndTxn (commit). Resolves once the commit is answered.
   */
  async transaction(topic: string, value: Buffer, groupId: string, offset: number): Promise<void> {
    await this.produce(topic, value);
    await this.commitOffset(groupId, topic, offset);
    await this.end();
  }

  private async produce(topic: string, value: Buffer): Promise<void> {
    const now = Date.now();
    const batch = await RecordBatch({
      records: [Record({ value, key: null, headers: {}, offsetDelta: 0, timestampDelta: 0 })],
      firstTimestamp: now,
      maxTimestamp: now,
      producerId: this.producerId,
      producerEpoch: this.epoch,
      firstSequence: this.sequence,
      transactional: true,
      lastOffsetDelta: 0,
    });
    await this.untilAccepted('Produce', RETRIED.produce, async () => {
      const d = await this.leader.request(0, 12, (e) =>
        e
          .writeUVarIntString(this.transactionalId)
          .writeInt16(-1) // acks=all
          .writeInt32(30_000)
          .writeUVarInt(2) // one topic
          .writeUVarIntString(topic)
          .writeUVarInt(2) // one partition
          .writeInt32(0)
          .writeUVarIntBytes(batch.buffer)
          .writeUVarInt(0) // partition's tagged fields
          .writeUVarInt(0) // topic's tagged fields
          .writeUVarInt(0),
      );
      d.readUVarInt(); // responses
      d.readUVarIntString();
      d.readUVarInt(); // partition responses
      d.readInt32();
      return { error: d.readInt16() };
    });
    this.sequence++;
  }

  private async commitOffset(groupId: string, topic: string, offset: number): Promise<void> {
    await this.untilAccepted('TxnOffsetCommit', RETRIED.transaction, async () => {
      const d = await this.groupCoordinator.request(28, 5, (e) =>
        e
          .writeUVarIntString(this.transactionalId)
          .writeUVarIntString(groupId)
          .writeInt64(this.producerId)
          .writeInt16(this.epoch)
          .writeInt32(-1) // generation_id: no group fencing (KIP-447)
          .writeUVarIntString('') // member_id
          .writeUVarIntString(null) // group_instance_id
          .writeUVarInt(2) // one topic
          .writeUVarIntString(topic)
          .writeUVarInt(2) // one partition
          .writeInt32(0)
          .writeInt64(offset)
          .writeInt32(-1) // committed_leader_epoch
          .writeUVarIntString(null) // committed_metadata
          .writeUVarInt(0)
          .writeUVarInt(0)
          .writeUVarInt(0),
      );
      d.readInt32(); // throttle_time_ms
      d.readUVarInt(); // topics
      d.readUVarIntString();
      d.readUVarInt(); // partitions
      d.readInt32();
      return { error: d.readInt16() };
    });
  }

  private async end(): Promise<void> {
    const d = await this.untilAccepted('EndTxn', RETRIED.transaction, async () =>
      producerIdAnswer(
        await this.txnCoordinator.request(26, 5, (e) =>
          e
            .writeUVarIntString(this.transactionalId)
            .writeInt64(this.producerId)
            .writeInt16(this.epoch)
            .writeBoolean(true)
            .writeUVarInt(0),
        ),
      ),
    );
    // Version 2: the coordinator bumped the epoch (a new producer id when the epoch ran out); sequences restart.
    const newId = d.producerId.toString() !== this.producerId.toString();
    if (!newId && d.epoch !== this.epoch + 1)
      throw new Error(
        `EndTxn v5 left the producer epoch at ${d.epoch} (was ${this.epoch}): the cluster did not run transaction protocol version 2 (is transaction.version 2 finalized?)`,
      );
    this.sequence = 0;
    this.producerId = d.producerId;
    this.epoch = d.epoch;
  }

  /** {@link untilAccepted} with this producer's retry wait, counting its retries. */
  private untilAccepted<T extends { error: number }>(
    what: string,
    retried: readonly number[],
    send: () => Promise<T>,
  ): Promise<T> {
    return untilAccepted(what, retried, this.retryMs, send, () => this.retries++);
  }

  /** The producer epoch the next transaction uses (version 2 bumps it at every EndTxn). */
  producerEpoch(): number {
    return this.epoch;
  }

  close(): void {
    for (const c of new Set([this.leader, this.txnCoordinator, this.groupCoordinator])) c.close();
  }
}

/**
 * The error codes (the Kafka protocol guide's) a request is sent again for: 51 CONCURRENT_TRANSACTIONS, 14
 * COORDINATOR_LOAD_IN_PROGRESS, 15 COORDINATOR_NOT_AVAILABLE, 16 NOT_COORDINATOR; on a Produce, 19
 * NOT_ENOUGH_REPLICAS, which a partition leader answers for the coordinator's errors (its transaction verification).
 */
const RETRIED: Record<'coordinator' | 'transaction' | 'produce', readonly number[]> = {
  coordinator: [14, 15],
  transaction: [51, 14, 15, 16],
  produce: [51, 19],
};

/** A broker answered `api` with error code `code` (the Kafka protocol guide's error codes). Not retried here. */
export class KafkaProtocolError extends Error {
  constructor(
    readonly api: string,
    readonly code: number,
  ) {
    super(`${api} answered error code ${code}`);
  }
}

/**
 * `send`, again after `retryMs` (calling `onRetry`) while it answers one of `retried`'s error codes.
 * @throws KafkaProtocolError for any other error code.
 */
async function untilAccepted<T extends { error: number }>(
  what: string,
  retried: readonly number[],
  retryMs: number,
  send: () => Promise<T>,
  onRetry?: () => void,
): Promise<T> {
  for (;;) {
    const answer = await send();
    if (!retried.includes(answer.error)) {
      throwIfError(answer.error, what);
      return answer;
    }
    onRetry?.();
    await new Promise((r) => setTimeout(r, retryMs));
  }
}

/** InitProducerId's and EndTxn's answer (v5 both): throttle_time_ms, error_code, producer_id, producer_epoch. */
function producerIdAnswer(d: DecoderInstance): { error: number; producerId: LongLike; epoch: number } {
  d.readInt32(); // throttle_time_ms
  const error = d.readInt16();
  return { error, producerId: d.readInt64(), epoch: d.readInt16() };
}

function throwIfError(code: number, api: string): void {
  if (code !== 0) throw new KafkaProtocolError(api, code);
}

/**
 * One TCP connection to a broker, flexible requests only (request header v2, response header v1), one request in
 * flight at a time per caller (responses matched by correlation id).
 */
class Connection {
  private correlationId = 0;
  private readonly waiting = new Map<
    number,
    { resolve: (d: DecoderInstance) => void; reject: (e: Error) => void }
  >();
  private pending: Buffer = Buffer.alloc(0);
  private closed: Error | undefined;

  private constructor(private readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => this.read(chunk));
    // A broker closes the connection, answering nothing, on a request it cannot parse (a version it lacks): every
    // request waiting fails then, and so does any sent after.
    socket.on('error', (e) => this.fail(e));
    socket.on('close', () => this.fail(new Error('the broker closed the connection')));
  }

  static open(host: string, port: number): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const s = connect({ host, port }, () => {
        s.off('error', reject);
        resolve(new Connection(s));
      });
      s.once('error', reject);
    });
  }

  private fail(e: Error): void {
    this.closed ??= e;
    for (const w of this.waiting.values()) w.reject(e);
    this.waiting.clear();
  }

  /** Sends API `apiKey` version `version` with the body `body` writes; resolves with a decoder of the response body. */
  request(
    apiKey: number,
    version: number,
    body: (e: EncoderInstance) => EncoderInstance,
  ): Promise<DecoderInstance> {
    if (this.closed) return Promise.reject(this.closed);
    const id = this.correlationId++;
    const message = body(
      new Encoder()
        .writeInt16(apiKey)
        .writeInt16(version)
        .writeInt32(id)
        .writeString('bench-transaction-v2')
        .writeUVarInt(0), // header v2's tagged fields
    );
    const framed = new Encoder().writeInt32(message.size()).writeEncoder(message);
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.socket.write(framed.buffer);
    });
  }

  private read(chunk: Buffer): void {
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    while (this.pending.length >= 4) {
      const size = this.pending.readInt32BE(0);
      if (this.pending.length < 4 + size) return;
      const d = new Decoder(this.pending.subarray(4, 4 + size));
      this.pending = this.pending.subarray(4 + size);
      const id = d.readInt32();
      d.readTaggedFields(); // response header v1
      const w = this.waiting.get(id);
      this.waiting.delete(id);
      w?.resolve(d);
    }
  }

  close(): void {
    this.socket.destroy();
  }
}
