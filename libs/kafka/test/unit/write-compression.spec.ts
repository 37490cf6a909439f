import { CompressionTypes } from 'kafkajs';
import { COMPRESSION_SETTING, CompressionConfigError, compressionSetting, writeCompression } from '../../src';

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

  it('a codec keyflow does not write is refused by name, not taken as unset', () => {
    for (const value of ['snappy', 'lz4', 'zstd:19', 'toString'])
      expect(() => compressionSetting({ [COMPRESSION_SETTING]: value })).toThrow(CompressionConfigError);
    expect(() => compressionSetting({ [COMPRESSION_SETTING]: 'lz4' })).toThrow(COMPRESSION_SETTING);
  });
});
