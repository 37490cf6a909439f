import type { Producer } from 'kafkajs';
import { TOO_LARGE_ERROR_TYPES } from '../client/client';

/**
 * kafkajs error types (broker error codes, https://kafka.apache.org/protocol#protocol_error_codes) that concern the
 * records of one request, not the producer: the producer stays usable after them, and the caller handles them.
 */
const RECORD_ERROR_TYPES = new Set([
  ...TOO_LARGE_ERROR_TYPES,
  'INVALID_RECORD',
  'CORRUPT_MESSAGE',
  'INVALID_TIMESTAMP',
]);

/**
 * Whether an error thrown by `send`/`sendBatch` of a producer made by `createIdempotentProducer` means the producer
 * failed for good. That producer retries retriable errors without limit (see client.ts), so whatever reaches the
 * caller is not retriable; only the per-record errors of {@link RECORD_ERROR_TYPES} leave it usable.
 */
export function isProducerFailure(err: unknown): boolean {
  const type = (err as { type?: unknown })?.type;
  return !(typeof type === 'string' && RECORD_ERROR_TYPES.has(type));
}

/**
 * The same producer, whose `send` and `sendBatch` call `onFailedForGood(err)` (then rethrow, as before) when an
 * error means the producer is unusable ({@link isProducerFailure}): fenced, disconnected, out of sequence, or any
 * other non-retriable error. Errors after `disconnect()` was called are the caller's own shutdown, not failures.
 * @returns a new object; use it instead of `producer` everywhere
 */
export function watchProducer(producer: Producer, onFailedForGood: (err: Error) => void): Producer {
  let disconnecting = false;
  const watch =
    <A extends unknown[], R>(f: (...a: A) => Promise<R>) =>
    async (...a: A): Promise<R> => {
      try {
        return await f(...a);
      } catch (e) {
        if (!disconnecting && isProducerFailure(e))
          onFailedForGood(e instanceof Error ? e : new Error(String(e)));
        throw e;
      }
    };
  return {
    ...producer,
    send: watch(producer.send),
    sendBatch: watch(producer.sendBatch),
    disconnect: () => {
      disconnecting = true;
      return producer.disconnect();
    },
  };
}
