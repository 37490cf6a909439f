import {
  NoBlobStoreError,
  PayloadInvalidError,
  PayloadNotJsonError,
  PayloadSerde,
  unreadableResultAsFailure,
  type EventCodec,
  type PayloadBlobs,
} from '../../src';

/** A blob store of one blob, `blob://1` = `{"big":true}`; any other ref is gone for good. */
const blobs: PayloadBlobs = {
  fitsInline: (t) => t.length <= 4,
  offload: async (_what, key, text) =>
    text.length <= 4
      ? { inline: text, ref: null }
      : { inline: '', ref: typeof key === 'string' ? key : key() },
  resolve: async (inline, ref) => {
    if (!ref) return inline;
    if (ref === 'blob://1') return '{"big":true}';
    throw Object.assign(new Error(`blob ${ref} not found`), {
      name: 'BlobNotFoundError',
      code: 'BLOB_NOT_FOUND',
      retryable: false,
    });
  },
};
const codec = {} as EventCodec;

const completed = (outputRef: string | null) => ({
  event: 'TaskCompleted' as const,
  schemaId: 7,
  value: {
    metadata: {
      eventId: 'e1',
      eventType: 'TaskCompleted',
      eventVersion: 2,
      occurredAt: 1_000,
      key: 'r1',
      correlationId: 'r1',
      causationId: null,
      traceparent: null,
      tracestate: null,
    } as never,
    runId: 'r1',
    stepId: 's1',
    taskType: 't',
    attempt: 2,
    idempotencyKey: 'r1/s1/2',
    output: '',
    outputRef,
    durationMs: 5,
    workerId: 'w',
    replayed: false,
  },
});

describe('PayloadSerde', () => {
  const serde = new PayloadSerde(codec, blobs);

  it('gives inline text as it is (no promise) and reads a referenced blob', async () => {
    expect(serde.text('{"a":1}', null)).toBe('{"a":1}');
    await expect(serde.text('', 'blob://1')).resolves.toBe('{"big":true}');
    await expect(new PayloadSerde(codec).text('', 'blob://1')).rejects.toBeInstanceOf(NoBlobStoreError);
  });

  it('resolves the claim-checked field of an event, and leaves an event without a reference alone', async () => {
    const inline = completed(null);
    expect(await serde.resolve(inline)).toBe(inline);
    const resolved = await serde.resolve(completed('blob://1'));
    expect(resolved.value.output).toBe('{"big":true}');
    await expect(serde.resolve(completed('blob://gone'))).rejects.toMatchObject({ retryable: false });
  });

  it('parses JSON and checks it; the error names the payload, not the text', () => {
    expect(serde.parse('{"a":1}', 'x')).toEqual({ a: 1 });
    expect(() => serde.parse('{secret', 'input of k')).toThrow(PayloadNotJsonError);
    expect(() => serde.parse('{secret', 'input of k')).toThrow('input of k is not JSON (SyntaxError)');
    expect(() => serde.parse('1', 'x', (v) => (typeof v === 'object' ? undefined : 'not an object'))).toThrow(
      PayloadInvalidError,
    );
  });

  it('offloads text over the limit and keeps text that fits inline', async () => {
    await expect(serde.offload('w', 'k', 'tiny', null)).resolves.toEqual({ inline: 'tiny', ref: null });
    await expect(serde.offload('w', () => 'k', 'too large', null)).resolves.toEqual({ inline: '', ref: 'k' });
  });
});

describe('unreadableResultAsFailure', () => {
  it('turns a TaskCompleted into the TaskFailed of its step: not retryable, one attempt, at the result time', () => {
    const err = Object.assign(new Error('blob gone'), { name: 'BlobNotFoundError', code: 'BLOB_NOT_FOUND' });
    const failed = unreadableResultAsFailure(completed('blob://gone'), err);
    expect(failed.event).toBe('TaskFailed');
    expect(failed.value).toMatchObject({ runId: 'r1', stepId: 's1', attempt: 2, idempotencyKey: 'r1/s1/2' });
    expect(failed.value.error).toEqual({
      errorClass: 'BlobNotFoundError',
      message: 'blob gone',
      retryable: false,
      code: 'BLOB_NOT_FOUND',
      attempts: 1,
      firstFailureAt: 1_000,
      lastFailureAt: 1_000,
    });
  });
});
