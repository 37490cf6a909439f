import { Kafka, logLevel, type LogEntry, type Producer } from 'kafkajs';
// For its effect: registers the snappy, lz4 and zstd codecs with kafkajs for every client of the project.
import '../codecs/codecs';
import { assertKafkajsPatched } from './kafkajs-patch';
import { JavaCompatiblePartitioner } from '../producer/partitioner';
import { maxDecompressedBytes } from '../codecs/decompression-limit';
import { compressionSetting } from '../producer/write-compression';
import { TRANSACTIONAL_RETRY, type CreateKafkaOptions } from './options';

const LEVELS: Record<number, 'error' | 'warn' | 'info' | 'debug'> = {
  [logLevel.ERROR]: 'error',
  [logLevel.WARN]: 'warn',
  [logLevel.INFO]: 'info',
  [logLevel.DEBUG]: 'debug',
};

/**
 * kafkajs error types of the broker's refusal of a record or batch over the topic's max.message.bytes (protocol
 * error codes 10 and 18, https://kafka.apache.org/protocol#protocol_error_codes).
 */
export const TOO_LARGE_ERROR_TYPES: ReadonlySet<string> = new Set([
  'MESSAGE_TOO_LARGE',
  'RECORD_LIST_TOO_LARGE',
]);

/** The `code` of keyflow's own refusal of a record no codec brings under a limit (RecordTooLargeError, dlq.ts). */
export const RECORD_TOO_LARGE = 'RECORD_TOO_LARGE';

/**
 * Whether a send failed because the broker refused a record or batch as too large ({@link TOO_LARGE_ERROR_TYPES}), or
 * keyflow refused to send it for that reason (code {@link RECORD_TOO_LARGE}).
 */
export const isTooLarge = (e: unknown): boolean =>
  TOO_LARGE_ERROR_TYPES.has((e as { type?: string })?.type ?? '') ||
  (e as { code?: string })?.code === RECORD_TOO_LARGE;

// kafkajs's error table (its protocol/error module) has no type declarations.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const kafkajsErrors = require('kafkajs/src/protocol/error') as {
  errorCodes: Array<{ type: string; message: string }>;
};
/**
 * kafkajs's texts of the refusals of {@link TOO_LARGE_ERROR_TYPES}, from kafkajs's own table. kafkajs logs such a refusal at
 * error level (its connection and its producer) and throws it to the caller, which decides: sendWithinLimit sends
 * it again compressed; any other caller's send fails with it, and the caller reports that (the worker's consumer,
 * the engine's transaction, the API answer). So these lines go out as warnings: a send that then succeeds leaves no
 * error in the log, and one that fails for good is reported once, by its caller.
 */
const TOO_LARGE_TEXTS: ReadonlySet<string> = new Set(
  kafkajsErrors.errorCodes.filter((e) => TOO_LARGE_ERROR_TYPES.has(e.type)).map((e) => e.message),
);

/** The level a kafkajs log line goes out at (see {@link TOO_LARGE_TEXTS}). */
function levelOf(entry: LogEntry): 'error' | 'warn' | 'info' | 'debug' {
  const level = LEVELS[entry.level] ?? 'info';
  if (level !== 'error') return level;
  const { message, error } = entry.log as { message: string; error?: unknown };
  return TOO_LARGE_TEXTS.has(message) || (typeof error === 'string' && TOO_LARGE_TEXTS.has(error))
    ? 'warn'
    : level;
}

/**
 * A kafkajs client whose own logs go to our structured logger (WARN and above by default), connecting with
 * `security` (TLS and SASL, see ./security; plaintext when absent).
 * @throws KafkajsUnpatchedError when kafkajs lacks the project's patch (see ./kafkajs-patch)
 */
export function createKafka(opts: CreateKafkaOptions): Kafka {
  assertKafkajsPatched();
  maxDecompressedBytes(); // a bad KEYFLOW_MAX_DECOMPRESSED_BYTES refuses the client, not every batch later
  compressionSetting(); // likewise a bad KEYFLOW_COMPRESSION, not every send later
  const { brokers, clientId, logger, level, security, ...rest } = opts;
  return new Kafka({
    ...(security?.ssl ? { ssl: security.ssl } : {}),
    ...(security?.sasl ? { sasl: security.sasl } : {}),
    brokers,
    clientId,
    logLevel: level ?? logLevel.WARN,
    retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 5_000 },
    logCreator: () => (entry) => {
      const { message, ...extra } = entry.log;
      logger[levelOf(entry)]({ kafkajs: entry.namespace, ...extra }, message);
    },
    ...rest,
  });
}

/**
 * Runs `request` (a transaction's request kafkajs sends once, such as `sendOffsets`, whose AddOffsetsToTxn is the
 * transaction's first request when nothing was sent before it) and, while the coordinator refuses it with
 * CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written; the open transaction is
 * unchanged by the refusal), runs it again after {@link TRANSACTIONAL_RETRY}'s first wait (5 ms), doubling up to its
 * longest (5 s), jitter +-20 %.
 * @param opts.maxTries runs in all (default 8: 7 waits, about 0.64 s in all, far below a transaction timeout).
 * @param opts.sleep, opts.random for tests.
 * @throws the last CONCURRENT_TRANSACTIONS error after `maxTries` runs; any other error at once, unchanged.
 */
export async function whileTransactionsConcurrent<T>(
  request: () => Promise<T>,
  opts: { maxTries?: number; sleep?: (ms: number) => Promise<void>; random?: () => number } = {},
): Promise<T> {
  const {
    maxTries = 8,
    sleep = (ms) => new Promise<void>((r) => setTimeout(r, ms)),
    random = Math.random,
  } = opts;
  for (let tries = 1; ; tries++) {
    try {
      return await request();
    } catch (e) {
      if ((e as { type?: unknown }).type !== 'CONCURRENT_TRANSACTIONS' || tries >= maxTries) throw e;
      const base = Math.min(
        TRANSACTIONAL_RETRY.initialRetryTime * 2 ** (tries - 1),
        TRANSACTIONAL_RETRY.maxRetryTime,
      );
      await sleep(Math.round(base * (0.8 + 0.4 * random())));
    }
  }
}

/**
 * Runs of a transaction's first request refused with CONCURRENT_TRANSACTIONS that {@link sendOffsetsFirst} makes:
 * 14, so 13 waits of 5 ms doubling up to 5 s, about 20 s in all, within a 30 s transaction timeout. The first request
 * of a transaction meets the previous one's markers (a loaded broker may take seconds to write them), as the
 * records' AddPartitionsToTxn did when it went first (kafkajs retries that one without a bound).
 */
export const FIRST_REQUEST_TRIES = 14;

/**
 * Sends a transaction's offsets now (`sendOffsets`, a `tx.sendOffsets`, in {@link whileTransactionsConcurrent} for up
 * to {@link FIRST_REQUEST_TRIES} runs: its AddOffsetsToTxn is the transaction's first request), before its records are
 * known: a consume-transform-produce loop calls it as soon as it holds a fetched batch (the offset to commit is the
 * batch's last offset + 1 whatever the batch produces), so AddOffsetsToTxn and the TxnOffsetCommit overlap the batch's
 * processing instead of following its records. The patched kafkajs (`coordinator one at a time`, ./kafkajs-patch)
 * sends the records' AddPartitionsToTxn after AddOffsetsToTxn; KIP-98 lets a transaction's requests come in any order
 * (its records and offsets commit or abort together). The caller must let the returned promise settle before it calls
 * `tx.commit()` or `tx.abort()` ({@link sendWithOffsets} does): the patched commit and abort wait for the transaction
 * coordinator's requests, not for the TxnOffsetCommit, which goes to the group coordinator, and one still in flight
 * when the transaction ends could be written after its markers (left pending, then committed by the same
 * transactional id's next commit).
 * @returns the offsets' requests, for {@link sendWithOffsets}; a rejection is handled here too (no unhandled rejection
 *   when the caller gives the transaction up), the caller still awaits it
 */
export function sendOffsetsFirst(sendOffsets: () => Promise<unknown>): Promise<unknown> {
  const sent = whileTransactionsConcurrent(sendOffsets, { maxTries: FIRST_REQUEST_TRIES });
  sent.catch(() => undefined);
  return sent;
}

/**
 * The sends of one Kafka transaction and its offsets, overlapped: `sends` run one after the other (each a
 * `tx.sendBatch`/`tx.send`) beside the offsets. `offsets` is either the offsets' requests already begun
 * ({@link sendOffsetsFirst}: sent before the records, while the batch was processed) or `sendOffsets` (a
 * `tx.sendOffsets`, in {@link whileTransactionsConcurrent}), then called at once beside the sends: the patched kafkajs
 * (`coordinator one at a time`, ./kafkajs-patch) sends AddOffsetsToTxn after the first send's AddPartitionsToTxn and
 * one request at a time to the transaction coordinator, so the TxnOffsetCommit overlaps the produce requests instead
 * of following them: one round trip fewer before EndTxn, as the Java producer overlaps them (KIP-98: the offsets and
 * records commit or abort together whatever their order). Resolves once every request is answered; call
 * `tx.commit()` after it.
 * @throws the first send's error, else the offsets' error, only after both settled (so an abort that follows never
 *   races a request in flight)
 */
export async function sendWithOffsets(
  sends: ReadonlyArray<() => Promise<unknown>>,
  offsets: Promise<unknown> | (() => Promise<unknown>),
): Promise<void> {
  let offsetsFailed = false;
  // The first send is begun before offsets given as a function (it registers with the patched eosManager
  // synchronously, so AddOffsetsToTxn waits for its AddPartitionsToTxn); a later one is not begun once the offsets
  // failed (a fenced producer): the transaction is aborted anyway.
  const records = (async () => {
    for (const send of sends) if (!offsetsFailed) await send();
  })();
  const committed = typeof offsets === 'function' ? whileTransactionsConcurrent(offsets) : offsets;
  committed.catch(() => (offsetsFailed = true));
  const [sent, offsetsSent] = await Promise.allSettled([records, committed]);
  if (sent.status === 'rejected') throw sent.reason;
  if (offsetsSent.status === 'rejected') throw offsetsSent.reason;
}

/**
 * The producer every service uses for events: idempotent (KIP-98: no duplicates or reordering from producer
 * retries), acks=all on every send (set per send), one request in flight per connection to keep order on retries.
 */
export function createIdempotentProducer(kafka: Kafka, transactionalId?: string): Producer {
  return kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    // murmur2 over the key, as the Java client: other clients put the same key in the same partition.
    createPartitioner: JavaCompatiblePartitioner,
    // An idempotent producer keeps retrying while the broker is away (bounded waits, unbounded count).
    retry: { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 100, maxRetryTime: 5_000 },
    ...(transactionalId ? { transactionalId } : {}),
  });
}
