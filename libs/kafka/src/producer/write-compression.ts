/**
 * The compression codec of the records keyflow's own producers write (KEYFLOW_COMPRESSION).
 *
 * Unset, keyflow writes as it always has: the engine's transactions (its state snapshots and what it sends with them)
 * gzip, the batching producers (task results from the workers, commands and events sent outside a
 * transaction) uncompressed. Set, every one of those writes that codec: `zstd` (node:zlib's libzstd at level 3,
 * frames that declare their content size; Kafka 2.1+ brokers, KIP-110), `gzip`, or `none`. The Java client
 * (zstd-jni), librdkafka (kcat) and kafkajs with keyflow's codecs read zstd; a plain kafkajs consumer of another team
 * reads only gzip and uncompressed records. DLQ records keep choosing their codec by fit (./dlq).
 */
import type { CompressionTypes } from 'kafkajs';
import { SettingsError } from '@keyflow/errors';
import { COMPRESSION_SETTING, WRITE_CODECS } from './options';

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
 * The codec a producer of keyflow's writes with: KEYFLOW_COMPRESSION's, else `fallback` (what that producer wrote
 * before the setting existed). Read at each send; an invalid value made createKafka refuse to start, so here it is
 * taken as unset (a throw inside a send would fail the send, not the configuration).
 */
export function writeCompression(fallback: CompressionTypes): CompressionTypes {
  try {
    return compressionSetting() ?? fallback;
  } catch {
    return fallback;
  }
}
