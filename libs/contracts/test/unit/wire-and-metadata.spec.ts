import * as avsc from 'avsc';
import fc from 'fast-check';
import { EVENT_VERSIONS } from '@keyflow/schemas';
import { encodeWireFormat } from '../../src/wire';
import { MissingMagicByteError, newMetadata, parseWireFormat, toWireFormat } from '../../src';

const loc = { topic: 't', partition: 1, offset: '9' };

describe('the Confluent wire format', () => {
  it('frames a body with magic byte 0 and a big-endian schema id, and splits it back', () => {
    const framed = toWireFormat(0x01020304, Buffer.from([9, 8, 7]));
    expect([...framed]).toEqual([0, 1, 2, 3, 4, 9, 8, 7]);
    const { schemaId, body } = parseWireFormat(framed, loc);
    expect(schemaId).toBe(0x01020304);
    expect([...body]).toEqual([9, 8, 7]);
  });

  it('refuses bytes that are not framed, saying why and where', () => {
    expect(() => parseWireFormat(Buffer.from([1, 0, 0, 0, 1, 2]), loc)).toThrow(MissingMagicByteError);
    expect(() => parseWireFormat(Buffer.from([1, 0, 0, 0, 1, 2]), loc)).toThrow(
      /t\[1\]@9: first byte is 0x01/,
    );
    expect(() => parseWireFormat(Buffer.alloc(4), loc)).toThrow(/4 bytes: shorter than the 5-byte header/);
  });
});

describe('encoding straight into the wire format', () => {
  const type = avsc.Type.forSchema({
    type: 'record',
    name: 'T',
    fields: [
      { name: 'id', type: 'long' },
      { name: 'text', type: 'string' },
      { name: 'tags', type: { type: 'array', items: 'string' } },
    ],
  });

  it('gives the bytes of toWireFormat over avsc toBuffer, for bodies small, larger than its buffer, and over 1 MiB', () => {
    const sizes = fc.oneof(
      { arbitrary: fc.integer({ min: 0, max: 300 }), weight: 8 },
      { arbitrary: fc.integer({ min: 16_000, max: 70_000 }), weight: 2 },
      { arbitrary: fc.constant(1_100_000), weight: 1 },
    );
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 31 - 1 }),
        fc.integer({ min: -(2 ** 40), max: 2 ** 40 }),
        sizes,
        fc.array(fc.string({ unit: 'grapheme', maxLength: 20 }), { maxLength: 5 }),
        (schemaId, id, size, tags) => {
          const datum = { id, text: 'é'.repeat(size), tags };
          const before = encodeWireFormat(schemaId, type, { id: 1, text: 'kept', tags: [] });
          const copy = Buffer.from(before);
          const got = encodeWireFormat(schemaId, type, datum);
          const want = toWireFormat(schemaId, type.toBuffer(datum));
          // Buffer#equals: jest's toEqual walks a 2 MB buffer element by element (40-60 s for this test).
          expect(got.length).toBe(want.length);
          expect(got.equals(want)).toBe(true);
          // An earlier result does not overlap what the next encode writes.
          expect(before).toEqual(copy);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('keeps every earlier result intact over many encodes in a row (values share memory until handed out)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 9_000 }), { minLength: 1, maxLength: 80 }), (sizes) => {
        const datums = sizes.map((size, i) => ({ id: i, text: 'x'.repeat(size), tags: [`t${i}`] }));
        // Between encodes, a datum refused after its id and text were written (its tags are not strings): what it
        // wrote is seen by no result.
        const refused = { id: 1, text: 'y'.repeat(500), tags: [1] };
        const results = datums.map((d) => {
          expect(() => encodeWireFormat(7, type, refused)).toThrow();
          return encodeWireFormat(7, type, d);
        });
        results.forEach((r, i) => expect(r.equals(toWireFormat(7, type.toBuffer(datums[i])))).toBe(true));
      }),
      { numRuns: 40 },
    );
  });

  it('throws, as toBuffer does, for a value the type does not accept', () => {
    expect(() => encodeWireFormat(1, type, { id: 'one', text: 'x', tags: [] })).toThrow();
    expect(() => encodeWireFormat(1, type, { id: 1, text: 'x' })).toThrow();
  });
});

describe('event metadata', () => {
  it('carries the event type and its latest schema version, ids and trace context', () => {
    const m = newMetadata('TaskCompleted', {
      key: 'k',
      correlationId: 'run-1',
      causationId: 'e-0',
      traceparent: 'tp',
      occurredAt: 5,
    });
    expect(m).toMatchObject({
      eventType: 'TaskCompleted',
      schemaVersion: EVENT_VERSIONS.TaskCompleted,
      key: 'k',
    });
    expect(m).toMatchObject({
      correlationId: 'run-1',
      causationId: 'e-0',
      traceparent: 'tp',
      tracestate: null,
      occurredAt: 5,
    });
    expect(m.eventId).toMatch(/^[0-9a-f-]{36}$/);
    expect(newMetadata('TaskCompleted', { key: 'k', correlationId: 'r' }).eventId).not.toBe(m.eventId);
  });
});
