export { BatchingProducer, messageBytes, PRODUCE_REQUEST_MAX_BYTES } from './batching-producer';
export { JavaCompatiblePartitioner, keyPartition, murmur2 } from './partitioner';
export {
  COMPRESSION_SETTING,
  WRITE_CODECS,
  CompressionConfigError,
  compressionSetting,
  writeCompression,
} from './write-compression';
export { watchProducer, isProducerFailure } from './producer-health';
