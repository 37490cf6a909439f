import fc from 'fast-check';
import { blobKey, payloadBlobKey } from '../../src';

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
