export {
  registerCompressionCodecs,
  guardedCodec,
  UndecodableBatchError,
  undecodableBatchError,
  ZstdCompressionError,
  NODE_HAS_ZSTD,
  KAFKA_CODEC_IDS,
  zstdCompress,
  gzipCompress,
  GZIP_LEVEL,
  zstdTakes,
  type KafkaCodecName,
  type KafkaCodec,
} from './codecs';
export {
  MAX_DECOMPRESSED_BYTES_SETTING,
  DEFAULT_MAX_DECOMPRESSED_BYTES,
  DecompressionLimitConfigError,
  maxDecompressedBytes,
} from './decompression-limit';
