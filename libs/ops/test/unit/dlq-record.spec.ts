import { randomBytes } from 'node:crypto';
import { CompressionTypes, messageBytes } from '@keyflow/kafka';
import { longRangeRepeats } from '@keyflow/testing/kcat';
import {
  DLQ_ERROR_MESSAGE_MAX_BYTES,
  DLQ_HEADERS,
  DLQ_HEADROOM_BYTES,
  dlqLimitBytes,
  dlqMessage,
  fitDlqRecord,
  header,
  REQUEST_RECORD_MAX_BYTES,
  SOCKET_REQUEST_MAX_BYTES,
  truncateUtf8,
} from '../../src';

describe('a DLQ record', () => {
  const original = {
    topic: 't.task.x',
    partition: 2,
    offset: '41',
    key: Buffer.from('run-1'),
    value: Buffer.alloc(10_000, 1),
    headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
  };
  const failure = (over: Partial<Parameters<typeof dlqMessage>[1]> = {}) => ({
    errorClass: 'Boom',
    errorMessage: 'bad',
    attempts: 3,
    firstFailureAt: 1,
    lastFailureAt: 2,
    consumerGroup: 'g',
    ...over,
  });

  it('exceeds its original by a bounded number of bytes, however long the error message and names are', () => {
    const huge = 'é'.repeat(1_000_000);
    const dl = dlqMessage(
      original,
      failure({ errorClass: huge, errorMessage: huge, errorCode: huge, consumerGroup: huge }),
      huge,
    );
    const added = messageBytes(dl) - messageBytes(original);
    expect(added).toBeLessThanOrEqual(4 * 1024);
    expect(added + 61).toBeLessThan(DLQ_HEADROOM_BYTES); // plus a record batch's header
    expect(dl.value).toBe(original.value);
    expect(dl.headers.traceparent).toBe(original.headers.traceparent);
  });

  it('keeps a short error message as it is', () => {
    expect(dlqMessage(original, failure()).headers['x-dlq-error-message']).toBe('bad');
  });

  it('needs a DLQ topic limit above twice its source topic limit', () => {
    expect(dlqLimitBytes(1_048_588)).toBe(2 * 1_048_588 + DLQ_HEADROOM_BYTES);
  });
});

describe('truncateUtf8', () => {
  it('cuts at a character boundary within the byte bound and marks the cut', () => {
    const s = 'a😀'.repeat(1_000); // 5 bytes each
    const t = truncateUtf8(s, DLQ_ERROR_MESSAGE_MAX_BYTES);
    expect(Buffer.byteLength(t)).toBeLessThanOrEqual(DLQ_ERROR_MESSAGE_MAX_BYTES);
    expect(t.endsWith('…')).toBe(true);
    // No lone surrogate: the text survives a UTF-8 round trip unchanged.
    expect(Buffer.from(t).toString()).toBe(t);
    expect(s.startsWith(t.slice(0, -1))).toBe(true);
  });

  it('leaves text within the bound alone', () => {
    expect(truncateUtf8('héllo', 6)).toBe('héllo');
    expect(truncateUtf8('héllo', 5)).toBe('h…');
  });

  it('never exceeds a bound too small for the mark', () => {
    for (const max of [0, 1, 2])
      expect(Buffer.byteLength(truncateUtf8('héllo', max))).toBeLessThanOrEqual(max);
    expect(truncateUtf8('héllo', 2)).toBe('h');
  });
});

/** The dead letter of an undecodable record, as the worker and the engine write it. */
const NOT_AVRO = {
  errorClass: 'MissingMagicByteError',
  errorMessage: 'not Avro',
  attempts: 1,
  firstFailureAt: 1,
  lastFailureAt: 1,
  consumerGroup: 'g',
};

describe('fitting a DLQ record under its limit (fitDlqRecord)', () => {
  const MIB = 1024 * 1024;
  const record = (value: Buffer) =>
    dlqMessage(
      { topic: 't.wf.requests', partition: 0, offset: '7', key: Buffer.from('run-1'), value, headers: {} },
      NOT_AVRO,
    );
  const measuredWith = async (value: Buffer, limit: number) =>
    fitDlqRecord(record(value), 't.wf.requests.dlq', limit);

  it('keeps a record under its limit as it is, gzip-compressed', async () => {
    const fit = await measuredWith(Buffer.alloc(1000, 7), MIB);
    expect(fit.compression).toBe(CompressionTypes.GZIP);
    expect(fit.record.value).toEqual(Buffer.alloc(1000, 7));
  });

  it('sends zstd a record only zstd brings under its limit (repeats further apart than gzip’s 32 KiB window)', async () => {
    const value = longRangeRepeats(300 * 1024, 20); // 6 MB: gzip ~6 MB, zstd ~300 KB
    const fit = await measuredWith(value, MIB);
    expect(fit.compression).toBe(CompressionTypes.ZSTD);
    expect(fit.record.value).toBe(value);
  });

  it('replaces a record no codec brings under its limit by a stand-in naming its size and where the original is', async () => {
    const value = randomBytes(2 * MIB);
    const fit = await measuredWith(value, MIB);
    expect(fit.record.value).toBeNull();
    expect(fit.record.key).toEqual(Buffer.from('run-1'));
    expect(header(fit.record.headers, DLQ_HEADERS.omitted)).toContain(`value of ${2 * MIB} bytes`);
    expect(header(fit.record.headers, DLQ_HEADERS.originalOffset)).toBe('7');
    expect(messageBytes(fit.record)).toBeLessThan(16 * 1024);
  });

  it('never fits a record against more than one request may carry (socket.request.max.bytes), whatever the limit', async () => {
    expect(REQUEST_RECORD_MAX_BYTES).toBeLessThan(SOCKET_REQUEST_MAX_BYTES);
    // Incompressible and over REQUEST_RECORD_MAX_BYTES: under the limit given, but no request carries it.
    const value = randomBytes(REQUEST_RECORD_MAX_BYTES + MIB);
    const fit = await measuredWith(value, 10 * SOCKET_REQUEST_MAX_BYTES);
    expect(fit.record.value).toBeNull();
    expect(header(fit.record.headers, DLQ_HEADERS.omitted)).toContain(`value of ${value.length} bytes`);
  }, 60_000);

  it('is a stand-in of bounded size whatever triage-like headers, key and values the original carried', async () => {
    const big = dlqMessage(
      {
        topic: 't.wf.requests',
        partition: 0,
        offset: '9',
        key: Buffer.alloc(100 * 1024, 'k'),
        value: randomBytes(2 * MIB),
        headers: {
          [DLQ_HEADERS.redriveCount]: 'x'.repeat(MIB),
          [DLQ_HEADERS.errorCode]: Array.from({ length: 1000 }, () => 'c'.repeat(1000)),
          traceparent: 'y'.repeat(MIB),
          nothing: null as unknown as string,
        },
      },
      {
        errorClass: 'E'.repeat(10_000),
        errorMessage: 'm'.repeat(100_000),
        attempts: 1,
        firstFailureAt: 1,
        lastFailureAt: 1,
        consumerGroup: 'g',
      },
    );
    const fit = await fitDlqRecord(big, 't.wf.requests.dlq', MIB);
    expect(fit.record.value).toBeNull();
    expect(fit.record.key).toBeNull(); // over 16 KiB: left out with the value
    expect(header(fit.record.headers, DLQ_HEADERS.redriveCount)).toBeUndefined(); // not a number
    expect(fit.record.headers.traceparent).toBeUndefined();
    expect(messageBytes(fit.record)).toBeLessThan(24 * 1024);
  });
});

describe("a DLQ record's triage headers", () => {
  const failure = NOT_AVRO;
  const at = { topic: 't.task.x', partition: 0, offset: '3', key: Buffer.from('k'), value: Buffer.from('v') };

  it('are its own: x-dlq-* headers the original carried are dropped, but a numeric redrive count', () => {
    const r = dlqMessage(
      {
        ...at,
        headers: {
          [DLQ_HEADERS.omitted]: 'forged',
          [DLQ_HEADERS.errorCode]: 'FORGED',
          [DLQ_HEADERS.redriveCount]: '2',
          traceparent: 't',
        },
      },
      failure,
    );
    expect(header(r.headers, DLQ_HEADERS.omitted)).toBeUndefined();
    expect(header(r.headers, DLQ_HEADERS.errorCode)).toBeUndefined();
    expect(header(r.headers, DLQ_HEADERS.redriveCount)).toBe('2');
    expect(header(r.headers, 'traceparent')).toBe('t');
    const bad = dlqMessage({ ...at, headers: { [DLQ_HEADERS.redriveCount]: 'x'.repeat(1000) } }, failure);
    expect(header(bad.headers, DLQ_HEADERS.redriveCount)).toBeUndefined();
  });

  it('shrink to the original coordinates when even a stand-in is over the limit', async () => {
    const r = dlqMessage(
      { ...at, value: randomBytes(64 * 1024), headers: {} },
      {
        ...failure,
        errorMessage: 'm'.repeat(5_000),
      },
    );
    const fit = await fitDlqRecord(r, 't.task.x.dlq', 2 * 1024);
    expect(fit.record.value).toBeNull();
    expect(fit.record.key).toBeNull();
    expect(header(fit.record.headers, DLQ_HEADERS.originalOffset)).toBe('3');
    expect(header(fit.record.headers, DLQ_HEADERS.omitted)).toContain('left out');
    expect(messageBytes(fit.record)).toBeLessThanOrEqual(2 * 1024);
  });
});
