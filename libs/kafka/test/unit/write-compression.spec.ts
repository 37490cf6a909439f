import { CompressionTypes } from 'kafkajs';
import {
  COMPRESS_MIN_BYTES,
  messageBytes,
  COMPRESSION_SETTING,
  CompressionConfigError,
  compressionSetting,
  writeCompression,
} from '../../src';

describe('KEYFLOW_COMPRESSION: the codec keyflow writes with', () => {
  afterEach(() => {
    delete process.env[COMPRESSION_SETTING];
  });

  it.each([
    ['zstd', CompressionTypes.ZSTD],
    ['gzip', CompressionTypes.GZIP],
    ['none', CompressionTypes.None],
    [' ZSTD ', CompressionTypes.ZSTD],
  ] as const)('%j names Kafka codec %i', (value, codec) => {
    expect(compressionSetting({ [COMPRESSION_SETTING]: value })).toBe(codec);
  });

  it('unset or blank keeps what each producer wrote before (its fallback)', () => {
    expect(compressionSetting({})).toBeUndefined();
    expect(compressionSetting({ [COMPRESSION_SETTING]: '  ' })).toBeUndefined();
    expect(writeCompression(CompressionTypes.GZIP)).toBe(CompressionTypes.GZIP);
    process.env[COMPRESSION_SETTING] = 'zstd';
    expect(writeCompression(CompressionTypes.GZIP)).toBe(CompressionTypes.ZSTD);
  });

  it('unset, a request under COMPRESS_MIN_BYTES goes uncompressed and a larger one in the fallback codec', () => {
    const record = (valueBytes: number) => messageBytes({ key: 'k', value: Buffer.alloc(valueBytes) });
    const small = record(100);
    const large = record(COMPRESS_MIN_BYTES);
    expect(small).toBeGreaterThan(100);
    expect(large).toBeGreaterThan(COMPRESS_MIN_BYTES);
    expect(writeCompression(CompressionTypes.GZIP, small)).toBe(CompressionTypes.None);
    expect(writeCompression(CompressionTypes.GZIP, COMPRESS_MIN_BYTES - 1)).toBe(CompressionTypes.None);
    expect(writeCompression(CompressionTypes.GZIP, COMPRESS_MIN_BYTES)).toBe(CompressionTypes.GZIP);
    expect(writeCompression(CompressionTypes.GZIP, large)).toBe(CompressionTypes.GZIP);
    // Named, the codec is written whatever the size.
    process.env[COMPRESSION_SETTING] = 'gzip';
    expect(writeCompression(CompressionTypes.GZIP, small)).toBe(CompressionTypes.GZIP);
    process.env[COMPRESSION_SETTING] = 'none';
    expect(writeCompression(CompressionTypes.GZIP, large)).toBe(CompressionTypes.None);
  });

  it('a codec keyflow does not write is refused by name, not taken as unset', () => {
    for (const value of ['snappy', 'lz4', 'zstd:19', 'toString'])
      expect(() => compressionSetting({ [COMPRESSION_SETTING]: value })).toThrow(CompressionConfigError);
    expect(() => compressionSetting({ [COMPRESSION_SETTING]: 'lz4' })).toThrow(COMPRESSION_SETTING);
  });
});
