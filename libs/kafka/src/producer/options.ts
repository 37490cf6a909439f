import { CompressionTypes } from 'kafkajs';

/** The environment variable naming the codec keyflow's producers write (`zstd`, `gzip`, `none`). Process-wide. */
export const COMPRESSION_SETTING = 'KEYFLOW_COMPRESSION';

/**
 * Fewest bytes (keys, values, headers) of a request the engine compresses when KEYFLOW_COMPRESSION is unset: 64 KiB.
 * Below it gzip saves a few KB of Avro and costs each request a zlib job on libuv's thread pool, on the path of every
 * step: at 20 runs/s of three steps, p50 / p99 start to finish 22-24 / 41-43 ms uncompressed against 27-28 / 90-117
 * ms gzipped, and 764-783 against 655-686 runs/s in a burst of 2,000 (BENCHMARKS.md "Latency", 2026-12-05). Kafka's
 * Java producer and librdkafka do not compress by default either (`compression.type` none).
 */
export const COMPRESS_MIN_BYTES = 64 * 1024;

/** The codecs KEYFLOW_COMPRESSION takes, by the name Kafka's `compression.type` uses. */
export const WRITE_CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  zstd: CompressionTypes.ZSTD,
} as const;

/**
 * Most bytes (keys, values, headers) keyflow puts in one produce request: half of Kafka's default message.max.bytes
 * (1,048,588, broker config `message.max.bytes`), so no partition's record batch in it can exceed what a broker with
 * the default accepts. The batching producer's default bound and the engine's request size.
 */
export const PRODUCE_REQUEST_MAX_BYTES = 512 * 1024;

/** What a {@link BatchingProducer} is built with (every field optional, see {@link BATCHING_DEFAULTS}). */
export interface BatchingProducerOptions {
  /**
   * How long a send waits for company before a request is made when none is in flight, in ms (default 0: the end of
   * the current event-loop turn, so sends made in one turn share a request).
   */
  lingerMs?: number;
  /** Most messages in one request (default 5,000); more wait for the next. */
  maxBatch?: number;
  /**
   * Most bytes in one request (default 512 KiB; messageBytes counts them); more wait for the next. Give half of the
   * cluster's message.max.bytes when it is not Kafka's default.
   */
  maxBytes?: number;
}

/** The {@link BatchingProducerOptions} a field left out takes. */
export const BATCHING_DEFAULTS = Object.freeze({
  lingerMs: 0,
  maxBatch: 5_000,
  maxBytes: PRODUCE_REQUEST_MAX_BYTES,
});
