import * as avsc from 'avsc';
import { EventCodec, toWireFormat } from '@keyflow/contracts';
import type { ConsumedMessage } from '@keyflow/kafka';
import { testInfra } from '@keyflow/testing';
import { startTrigger } from '@keyflow/workflow';
import { randomBytes } from 'node:crypto';
import { triggerRecord, TriggerRecordError } from '../../src/triggers/record';

/**
 * A team's producer (any language, any subject naming) writes Avro in the Confluent wire format; a topic trigger reads
 * it through the registry with the writer schema, as plain JSON values (bytes as base64, unions unwrapped).
 */
describe('triggerRecord on a registry Avro record', () => {
  const registryUrl = testInfra().schemaRegistryUrl;
  const namespace = `com.acme.t${randomBytes(4).toString('hex')}`;
  const schema = {
    type: 'record',
    name: 'Order',
    namespace,
    fields: [
      { name: 'orderId', type: 'string' },
      { name: 'total', type: 'long' },
      { name: 'signature', type: 'bytes' },
      { name: 'note', type: ['null', 'string'], default: null },
      { name: 'ref', type: ['null', 'long', 'string'], default: null },
      { name: 'status', type: { type: 'enum', name: 'Status', symbols: ['NEW', 'PAID'] } },
    ],
  };
  const codec = new EventCodec({ registryUrl, topicPrefix: 't.' });
  const orders = startTrigger({ name: 'orders', topic: 'orders', workflow: 'order-saga' });
  let schemaId: number;

  beforeAll(async () => {
    // RecordNameStrategy: the subject is the record's full name, not `<topic>-value`.
    const subject = `${namespace}.Order`;
    const res = await fetch(`${registryUrl}/subjects/${encodeURIComponent(subject)}/versions`, {
      method: 'POST',
      headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' },
      body: JSON.stringify({ schema: JSON.stringify(schema) }),
    });
    expect(res.status).toBe(200);
    schemaId = ((await res.json()) as { id: number }).id;
  });

  const message = (value: Buffer): ConsumedMessage => ({
    topic: 'orders',
    partition: 0,
    offset: '5',
    key: Buffer.from('o-1'),
    value,
    headers: {},
    timestamp: '1700000000000',
  });

  it('decodes with the writer schema under any subject: bytes as base64, unions as plain values, enums as text', async () => {
    const body = avsc.Type.forSchema(schema as avsc.Schema).toBuffer({
      orderId: 'o-1',
      total: 1250,
      signature: Buffer.from([1, 2, 255]),
      note: 'gift',
      ref: 42,
      status: 'PAID',
    });
    const r = await triggerRecord(orders, codec, message(toWireFormat(schemaId, body)));
    expect(r.value).toEqual({
      orderId: 'o-1',
      total: 1250,
      signature: Buffer.from([1, 2, 255]).toString('base64'),
      note: 'gift',
      ref: 42,
      status: 'PAID',
    });
    expect(r).toMatchObject({ topic: 'orders', partition: 0, offset: '5', key: 'o-1' });
  });

  it('a null union branch decodes as null', async () => {
    const body = avsc.Type.forSchema(schema as avsc.Schema).toBuffer({
      orderId: 'o-2',
      total: 0,
      signature: Buffer.alloc(0),
      note: null,
      ref: 'r-7',
      status: 'NEW',
    });
    const r = await triggerRecord(orders, codec, message(toWireFormat(schemaId, body)));
    expect(r.value).toMatchObject({ note: null, ref: 'r-7', signature: '' });
  });

  it('a schema id the registry does not know is TRIGGER_RECORD_UNDECODABLE (the record is at fault)', async () => {
    const e = await triggerRecord(
      orders,
      codec,
      message(toWireFormat(2_000_000_000, Buffer.from([2]))),
    ).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(TriggerRecordError);
    expect(e).toMatchObject({ code: 'TRIGGER_RECORD_UNDECODABLE', retryable: false });
  });

  it('a body the writer schema cannot read is TRIGGER_RECORD_UNDECODABLE', async () => {
    const e = await triggerRecord(orders, codec, message(toWireFormat(schemaId, Buffer.from([0x80])))).catch(
      (err: unknown) => err,
    );
    expect(e).toMatchObject({ code: 'TRIGGER_RECORD_UNDECODABLE' });
  });
});
