import fc from 'fast-check';
import { blobKey, blobKeySegment, legacyRunBlobPrefix, payloadBlobKey, runBlobPrefix } from '../../src';

/** The directory of one run's blobs of `kind`, as the orchestrator derives it to expire them (`<kind>/<run>/`). */
const runDir = (kind: string, runId: string) => payloadBlobKey(kind, runId, '').replace(/[^/]+$/, '');

// Run ids as clients send them: any text, with the characters that used to be folded together over-represented.
const runId = fc.oneof(
  fc.string({ unit: fc.constantFrom('x', '1', '_', ':', '.', '-', '/', '%', 'é'), maxLength: 8 }),
  fc.string({ maxLength: 12 }),
  fc.string({ unit: 'grapheme', maxLength: 6 }),
);

describe('payload blob keys of different runs never collide', () => {
  it('run ids that differ only in an unsafe character or a leading dot get different keys (x:1/x_1, .x/_x)', () => {
    expect(payloadBlobKey('state', 'x:1', '3')).not.toBe(payloadBlobKey('state', 'x_1', '3'));
    expect(payloadBlobKey('state', '.x', '3')).not.toBe(payloadBlobKey('state', '_x', '3'));
  });

  it('a run’s key prefix is never a prefix of another run’s keys (injective, and run vs run-2 separated)', () => {
    fc.assert(
      fc.property(runId, runId, fc.string(), (a, b, name) => {
        fc.pre(a !== b);
        expect(payloadBlobKey('state', b, name).startsWith(runDir('state', a))).toBe(false);
        expect(payloadBlobKey('state', a, name)).not.toBe(payloadBlobKey('state', b, name));
      }),
      { numRuns: 2_000 },
    );
  });

  it('every key is a valid blob key whose run part is one path segment', () => {
    fc.assert(
      fc.property(runId, fc.string(), (a, name) => {
        const key = payloadBlobKey('results', a, name);
        expect(blobKey(key)).toBe(key);
        expect(key.split('/')).toHaveLength(3);
      }),
      { numRuns: 2_000 },
    );
  });
});

describe('blob keys written before the injective encoding', () => {
  it('the old prefix is named only for run ids whose keys changed (a UUID keeps its keys)', () => {
    expect(legacyRunBlobPrefix('state', 'x:1')).toBe('state/x_1/');
    expect(legacyRunBlobPrefix('state', '.x')).toBe('state/_x/');
    expect(legacyRunBlobPrefix('state', 'x_1')).toBe('state/x_1/');
    expect(legacyRunBlobPrefix('state', '0b6c9f1e-3f0a-4a57-9a43-1a2b3c4d5e6f')).toBeNull();
    expect(legacyRunBlobPrefix('state', '')).toBeNull(); // `state//` would name every run's directory
    expect(runBlobPrefix('state', '0b6c9f1e-3f0a-4a57-9a43-1a2b3c4d5e6f')).toBe(
      'state/0b6c9f1e-3f0a-4a57-9a43-1a2b3c4d5e6f/',
    );
  });

  it('a long run id keeps a short, still distinct segment (a file name stays under 255 bytes)', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 61, maxLength: 400, unit: 'grapheme' }), (a) => {
        const seg = blobKeySegment(a);
        expect(seg.length).toBeLessThanOrEqual(186);
        expect(blobKeySegment(a + 'x')).not.toBe(seg);
      }),
      { numRuns: 300 },
    );
  });
});
