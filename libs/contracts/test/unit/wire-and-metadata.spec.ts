import { EVENT_VERSIONS } from '@keyflow/schemas';
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
