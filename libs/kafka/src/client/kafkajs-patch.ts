import { readFileSync } from 'node:fs';
import { KeyflowError, retryableOf } from '@keyflow/errors';

/**
 * What `patches/kafkajs+2.2.4.patch` (applied by `patch-package` on `npm install`/`npm ci`) fixes in kafkajs 2.2.4,
 * by file (under kafkajs/src) and the marker each patched file carries:
 * - producer/sendMessages.js: a send kept its responses per broker across retries, so a partition whose leader
 *   moved to a broker that had already answered was never sent again and the send resolved without it (kafkajs
 *   issue 1303; in a transaction the rest committed without it). Patched: kept per topic-partition, each message's
 *   partition assigned once, every request of an attempt settled before the retry. Also: the sends of one
 *   idempotent producer run one at a time (a failed request rolls back sequence numbers the broker may have used;
 *   a concurrent send taking one was acknowledged as a duplicate and lost), and a partition the topic does not
 *   have is refused before anything is sent (it was dropped silently). And: a produce response with an error for
 *   some partitions (one refused as too large) rolled every partition's sequence numbers back, also those the
 *   broker wrote; the broker then took the next batch of the same length for such a partition for a duplicate and
 *   dropped it, acknowledged (KIP-98 sequence checks). Patched: the written partitions keep their sequence numbers
 *   and count as written; protocol/requests/produce/v3/response.js (the parser of produce v3 to v7) hands the
 *   sender the whole response with the error, names a retriable error first when a response has several (a
 *   partition that may have been written, NOT_ENOUGH_REPLICAS_AFTER_APPEND, is then sent again with the same
 *   sequence numbers and settled, before a refusal for good fails the send), and takes DUPLICATE_SEQUENCE_NUMBER
 *   (46) for written, as the Java producer does. Of the requests of one attempt, a retriable failure is thrown first
 *   for the same reason.
 * - consumer/filterAbortedMessages.js: read_committed took the broker's aborted-transaction list as ordered by first
 *   offset and entered one per record, so with interleaved transactions of several producers a record of an
 *   aborted one was delivered (KIP-98). Patched: ordered by first offset, every begun one entered. Also: only a
 *   control record ends an aborted transaction (a data record with the key 00 00 00 00 did).
 * - producer/groupMessagesPerPartition.js: every message added to a partition's group copied the group's whole array
 *   (`[...current, message]`), so a send of n messages to one partition cost n²/2 copies: 12.5 million element
 *   copies for the 5,000 messages of one request, a large share of the CPU and allocation of every batched send
 *   (kafkajs PR 1576, open upstream). Patched: one pass appending in place; the groups and their order are the same.
 * - protocol/requests/fetch/v4/decodeMessages.js: every record batch of a partition in a fetch response was
 *   decoded at once, and the broker's fetch limits count compressed bytes, so one fetch of small compression bombs
 *   held their whole decompressed size. Patched: batches after the first are decoded only while the records decoded
 *   so far hold less than a budget (./codecs sets it to KEYFLOW_MAX_DECOMPRESSED_BYTES); the rest is fetched again
 *   from the next offset, as a tail cut by maxBytes is.
 * - protocol/encoder.js (a speed patch, not a fix): each encoder (one per record, one per header, one per request
 *   part) started on `Buffer.alloc`, a new zero-filled ArrayBuffer, and each varint went through an array and a
 *   `Buffer.from`: about half the CPU of encoding a record (4 to 7 instead of 7 to 19 us per 400-byte record with two
 *   headers, BENCHMARKS.md "Workers", 2026-12-03 evening). Patched: `Buffer.allocUnsafe` (a slice of Node's pool),
 *   safe because every byte up to the encoder's offset is written before it is read (an encoder's bytes now share
 *   Node's pool with other small Buffers, as Buffer.from(string) does: read `buffer`, never the slab behind it);
 *   varints written in place, with the bytes of before for any number.
 * - protocol/recordBatch/v0/decoder.js: a compressed batch's records were parsed whatever their count, so a few KB
 *   of zstd holding millions of empty records made millions of record objects (about 94 bytes each). Patched: a
 *   batch counting more records than the budget holds parsed is not decompressed; a hook (./codecs) returns one
 *   stand-in record marking it undecodable. And a codec's stand-in for a batch it could not decode is parsed as its
 *   one record (it held as many stand-ins as the header counted, up to a million, and threw above).
 * - producer/eosManager/index.js (a speed patch, not a fix): a transactional producer sent FindCoordinator before each
 *   AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn, four of a transaction's nine requests (one
 *   engine transaction per input batch). Patched: the transaction and group coordinators are kept by node id, as the
 *   Java producer keeps them (its TransactionManager looks one up again on NOT_COORDINATOR or
 *   COORDINATOR_NOT_AVAILABLE); a request that fails on a kept coordinator with one of those, a connection error or
 *   a request timeout (a half-open connection to a dead broker stays connected) is sent once more to the coordinator
 *   found again, which is what every request did before. And: an EndTxn answered CONCURRENT_TRANSACTIONS or
 *   GROUP_LOAD_IN_PROGRESS (sent again after its applied original lost its answer, while the markers are written) is
 *   sent again with backoff within the transaction timeout, as the Java producer's EndTxn handler does; it was
 *   reported failed (a commit that happened) and left the producer in COMMITTING. kafkajs's own lists of those
 *   errors used the protocol's names, not its own (codes 14-16), so TxnOffsetCommit never retried them. And
 *   (`coordinator one at a time`, with producer/sendMessages.js): the requests to the transaction coordinator go one
 *   at a time, as the Java producer's TransactionManager sends them (a second one while the first is appended to the
 *   transaction log is refused CONCURRENT_TRANSACTIONS), and sendOffsets sends AddOffsetsToTxn once the sends
 *   already begun have their partitions added (a refused AddPartitionsToTxn keeps it waiting for the retry); so a
 *   transaction's offsets can be sent beside its records (sendWithOffsets), their TxnOffsetCommit overlapping the
 *   produce requests: one round trip fewer per commit. commit() and abort() wait for those requests (the
 *   transaction coordinator's, not a TxnOffsetCommit to the group coordinator: the caller awaits that one, as
 *   sendWithOffsets does) before they decide whether there is a transaction to end, and offsets whose transaction
 *   ended before their AddOffsetsToTxn or TxnOffsetCommit was sent are not sent.
 * - protocol/request.js, protocol/requests/produce/v3/request.js, protocol/recordBatch/v0/index.js,
 *   protocol/recordBatch/record/v0/index.js and protocol/recordBatch/crc32C/crc32C.js (a speed patch, not a fix:
 *   `encoders of known size`): a produce request was a chain of encoders (each header, record, batch body, batch,
 *   partition, topic, payload and frame), each starting at 512 bytes, growing by doubling and copying the whole of
 *   the level below, and the batch's CRC-32C was a JavaScript loop a byte at a time: 11-19 us per 2 KB record with
 *   the earlier patches. Patched: a record, a record batch and a request are each written once into a buffer of
 *   their exact size (headers in place, the CRC computed over the batch body in place, a batch copied once into the
 *   request's payload and once into its frame), small varlongs written in place, and CRC-32C from @node-rs/crc32
 *   (native; the loop stays where its binary is missing). The same bytes as the unpatched kafkajs 2.2.4 for any
 *   request (kafkajs-patch.spec.ts), in 0.13-0.69 of its time (`npm run bench:produce-encode`).
 * - consumer/consumerGroup.js (a cost patch, not a fix): a consumer's `maxWaitTimeInMs` may be a function, asked
 *   before each fetch. The ordered consumer (../consumer) waits briefly while one of its partitions is paused (left
 *   out of the fetch in flight, so its records wait for the next fetch) and long otherwise: an idle worker fetched
 *   every 10 ms, 100 requests a second on the broker.
 */
export const KAFKAJS_PATCHES = {
  'producer/sendMessages.js': 'keyflow patch (kafkajs issue 1303)',
  'consumer/filterAbortedMessages.js': 'keyflow patch (kafkajs read_committed)',
  'producer/groupMessagesPerPartition.js': 'keyflow patch (kafkajs PR 1576)',
  'protocol/requests/produce/v3/response.js': 'keyflow patch (produce partial)',
  'protocol/recordBatch/record/v0/index.js': 'keyflow patch (null header value)',
  'protocol/requests/fetch/v4/decodeMessages.js': 'keyflow patch (decoded budget)',
  'protocol/recordBatch/v0/decoder.js': 'keyflow patch (record count guard)',
  'protocol/encoder.js': 'keyflow patch (encoder from the pool)',
  'network/requestQueue/index.js': 'keyflow patch (negative timeout)',
  'producer/eosManager/index.js': 'keyflow patch (coordinator one at a time)',
  'consumer/consumerGroup.js': 'keyflow patch (wait chosen per fetch)',
  'protocol/request.js': 'keyflow patch (encoders of known size)',
  'protocol/requests/produce/v3/request.js': 'keyflow patch (encoders of known size)',
  'protocol/recordBatch/v0/index.js': 'keyflow patch (encoders of known size)',
  'protocol/recordBatch/crc32C/crc32C.js': 'keyflow patch (native CRC-32C)',
} as const;

/** kafkajs runs without the project's patch (installed with `--ignore-scripts`, or another copy). Not retryable. */
export class KafkajsUnpatchedError extends KeyflowError {
  readonly code = 'KAFKAJS_UNPATCHED' as const;
  readonly retryable = retryableOf('KAFKAJS_UNPATCHED');
  constructor(readonly file: string) {
    super(
      `${file} lacks the project's patch (a send can lose a partition's records when its leader moves; a ` +
        'read_committed consumer can deliver aborted records). In this repository run `npm ci` (its postinstall ' +
        'applies patches/ with patch-package), not --ignore-scripts; an application installs @keyflow/kafka with ' +
        'npm or pnpm, which keep the patched kafkajs it bundles (Yarn does not)',
    );
  }
}

let checked = false;

/**
 * Throws {@link KafkajsUnpatchedError} unless the kafkajs this process loads carries every patch of
 * {@link KAFKAJS_PATCHES}. Reads those files once per process.
 */
export function assertKafkajsPatched(): void {
  if (checked) return;
  for (const [path, marker] of Object.entries(KAFKAJS_PATCHES)) {
    const file = require.resolve(`kafkajs/src/${path}`);
    if (!readFileSync(file, 'utf8').includes(marker)) throw new KafkajsUnpatchedError(file);
  }
  checked = true;
}
