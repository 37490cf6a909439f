/**
 * The compression codec of the records keyflow's own producers write (KEYFLOW_COMPRESSION).
 *
 * Unset, the engine's transactions (its state snapshots and what it sends with them) gzip a request of at least
 * {@link COMPRESS_MIN_BYTES} and send a smaller one uncompressed; the batching producers (task results from the
 * workers, commands and events sent outside a transaction) write uncompressed. Set, every one of those writes that
 * codec, whatever the size: `zstd` (node:zlib's libzstd at level 3, frames that declare their content size; Kafka
 * 2.1+ brokers, KIP-110), `gzip`, or `none`. The Java client (zstd-jni), librdkafka (kcat) and kafkajs with keyflow's
 * codecs read zstd; a plain kafkajs consumer of another team reads only gzip and uncompressed records. DLQ records
 * keep choosing their codec by fit (./dlq).
 */
import { CompressionTypes } from 'kafkajs';
import { SettingsError } from '@keyflow/errors';
import { COMPRESS_MIN_BYTES, COMPRESSION_SETTING, WRITE_CODECS } from './options';

/** KEYFLOW_COMPRESSION is not one of {@link WRITE_CODECS}' names. Not retryable. */
export class CompressionConfigError extends SettingsError {
  readonly code = 'COMPRESSION_CONFIG';
  constructor(value: string) {
    super('compression', [
      `${COMPRESSION_SETTING}=${JSON.stringify(value)}: expected one of ${Object.keys(WRITE_CODECS).join(', ')}`,
    ]);
  }
}

/**
 * The codec KEYFLOW_COMPRESSION names, or undefined when it is unset or blank.
 * @throws CompressionConfigError for any other value (createKafka calls this, so a service refuses to start).
 */
export function compressionSetting(env: NodeJS.ProcessEnv = process.env): CompressionTypes | undefined {
  const raw = env[COMPRESSION_SETTING]?.trim().toLowerCase();
  if (!raw) return undefined;
  if (!Object.hasOwn(WRITE_CODECS, raw)) throw new CompressionConfigError(env[COMPRESSION_SETTING]!);
  return WRITE_CODECS[raw as keyof typeof WRITE_CODECS];
}

/**
 * The codec a producer of keyflow's writes a request with: KEYFLOW_COMPRESSION's, else `fallback` (what that producer
 * wrote before the setting existed), except that a request of fewer than {@link COMPRESS_MIN_BYTES} goes
 * uncompressed when the setting is unset and `requestBytes` is given. Read at each send; an invalid value made
 * createKafka refuse to start, so here it is taken as unset (a throw inside a send would fail the send, not the
 * configuration).
 * @param requestBytes the request's records in bytes (keys, values, headers: `messageBytes` summed).
 */
export function writeCompression(fallback: CompressionTypes, requestBytes?: number): CompressionTypes {
  let set: CompressionTypes | undefined;
  try {
    set = compressionSetting();
  } catch {
    // invalid: refused by createKafka already (see above)
  }
  if (set !== undefined) return set;
  return requestBytes !== undefined && requestBytes < COMPRESS_MIN_BYTES ? CompressionTypes.None : fallback;
}
