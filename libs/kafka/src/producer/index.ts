export { BatchingProducer, messageBytes } from './batching-producer';
export { JavaCompatiblePartitioner, keyPartition, murmur2 } from './partitioner';
export { CompressionConfigError, compressionSetting, writeCompression } from './write-compression';
export { COMPRESS_MIN_BYTES, COMPRESSION_SETTING, WRITE_CODECS, PRODUCE_REQUEST_MAX_BYTES } from './options';
export { watchProducer, isProducerFailure } from './producer-health';
