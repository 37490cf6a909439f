import { CompressionCodecs, CompressionTypes } from '@keyflow/kafka';
import { KAFKA_CODEC_IDS, guardedCodec, type KafkaCodec } from '@keyflow/kafka';

/**
 * Makes this process's lz4 decompressor reject every batch (with TEST_REJECT_LZ4=1 in a test service process): a
 * stand-in for a codec gap, i.e. a record batch the reader cannot decode. A real one cannot be written on purpose:
 * the broker decompresses to validate and refuses corrupt compressed batches on produce (Kafka 4.1). Compression is
 * left as it is.
 * @returns a function that puts the real decompressor back.
 */
export function rejectLz4Batches(): () => void {
  const codecs = CompressionCodecs as Record<number, () => KafkaCodec>;
  const real = codecs[CompressionTypes.LZ4];
  codecs[CompressionTypes.LZ4] = guardedCodec(KAFKA_CODEC_IDS.lz4, () => ({
    compress: (e) => real().compress(e),
    decompress: () => Promise.reject(new Error('unsupported LZ4 frame feature (test stand-in)')),
  }));
  return () => {
    codecs[CompressionTypes.LZ4] = real;
  };
}
