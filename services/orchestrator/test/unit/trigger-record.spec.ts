import { EventCodec } from '@keyflow/contracts';
import type { ConsumedMessage } from '@keyflow/kafka';
import {
  signalTrigger,
  startTrigger,
  workflow,
  z,
  type TriggerDefinition,
  type TriggerRecord,
} from '@keyflow/workflow';
import {
  applied,
  triggerRecord,
  TriggerRecordError,
  TRIGGER_SOURCE_HEADERS,
} from '../../src/triggers/record';

// JSON values never reach the registry; a wire-format value reaches this address, where nothing listens.
const codec = new EventCodec({ registryUrl: 'http://127.0.0.1:1', topicPrefix: 't.' });
const saga = workflow('order-saga', 2, {
  input: z.object({ orderId: z.string(), total: z.number().min(0) }),
})
  .task('charge', { type: 'charge' })
  .build();
const orders = startTrigger({ name: 'orders', topic: 'orders', workflow: saga });

const message = (m: Partial<ConsumedMessage>): ConsumedMessage => ({
  topic: 'orders',
  partition: 2,
  offset: '17',
  key: Buffer.from('order-1'),
  value: Buffer.from(JSON.stringify({ orderId: 'o-1', total: 5 })),
  headers: {},
  timestamp: '1700000000000',
  ...m,
});

const record = (r: Partial<TriggerRecord> = {}): TriggerRecord => ({
  topic: 'orders',
  partition: 2,
  offset: '17',
  key: 'order-1',
  value: { orderId: 'o-1', total: 5 },
  headers: {},
  timestamp: 1_700_000_000_000,
  ...r,
});

/** What `f` throws, as a TriggerRecordError. */
async function failure(f: () => unknown): Promise<TriggerRecordError> {
  try {
    await f();
  } catch (e) {
    expect(e).toBeInstanceOf(TriggerRecordError);
    return e as TriggerRecordError;
  }
  throw new Error('did not throw');
}

describe('triggerRecord: a source record as the trigger functions see it', () => {
  it('a JSON record gives its topic, partition, offset, key, parsed value, headers as text and timestamp', async () => {
    const r = await triggerRecord(
      orders,
      codec,
      message({ headers: { h: Buffer.from('v'), twice: ['a', 'b'] } }),
    );
    expect(r).toEqual({
      topic: 'orders',
      partition: 2,
      offset: '17',
      key: 'order-1',
      value: { orderId: 'o-1', total: 5 },
      headers: { h: 'v', twice: 'b' },
      timestamp: 1_700_000_000_000,
    });
  });

  it('a record without a key has key null', async () => {
    expect((await triggerRecord(orders, codec, message({ key: null }))).key).toBeNull();
  });

  it('a null value (a tombstone) is TRIGGER_RECORD_UNDECODABLE', async () => {
    const e = await failure(() => triggerRecord(orders, codec, message({ value: null })));
    expect(e.code).toBe('TRIGGER_RECORD_UNDECODABLE');
    expect(e.retryable).toBe(false);
  });

  it('a value that is not JSON is TRIGGER_RECORD_UNDECODABLE', async () => {
    const e = await failure(() => triggerRecord(orders, codec, message({ value: Buffer.from('{"a":') })));
    expect(e.code).toBe('TRIGGER_RECORD_UNDECODABLE');
    expect(e.message).toMatch(/not JSON \(5 bytes\)/);
  });

  it("format 'json' reads a value starting with byte 0 as JSON (so not JSON), never asking the registry", async () => {
    const json = startTrigger({ name: 'orders', topic: 'orders', workflow: saga, format: 'json' });
    const value = Buffer.from([0, 0, 0, 0, 1, 2, 3]);
    const e = await failure(() => triggerRecord(json, codec, message({ value })));
    expect(e.code).toBe('TRIGGER_RECORD_UNDECODABLE');
    expect(e.message).toMatch(/^not JSON/);
  });

  it("format 'avro' on a value not in the wire format is TRIGGER_RECORD_UNDECODABLE (not Avro)", async () => {
    const avro = startTrigger({ name: 'orders', topic: 'orders', workflow: saga, format: 'avro' });
    const e = await failure(() => triggerRecord(avro, codec, message({})));
    expect(e.code).toBe('TRIGGER_RECORD_UNDECODABLE');
    expect(e.message).toMatch(/^not Avro/);
  });

  it("format 'auto' on a value starting with byte 0 too short for a schema id is TRIGGER_RECORD_UNDECODABLE", async () => {
    const e = await failure(() => triggerRecord(orders, codec, message({ value: Buffer.from([0, 1]) })));
    expect(e.code).toBe('TRIGGER_RECORD_UNDECODABLE');
  });

  it('a wire-format value while the registry cannot be reached throws the retryable registry error (no dead letter)', async () => {
    const value = Buffer.from([0, 0, 0, 0, 42, 2, 4]);
    const e = await triggerRecord(orders, codec, message({ value })).catch((err: unknown) => err);
    expect(e).not.toBeInstanceOf(TriggerRecordError);
    expect((e as { retryable?: boolean }).retryable).toBe(true);
  });

  it('a redriven record (from the trigger topic) is read as its source record: topic, partition, offset, timestamp', async () => {
    const headers = {
      [TRIGGER_SOURCE_HEADERS.topic]: Buffer.from('orders'),
      [TRIGGER_SOURCE_HEADERS.partition]: Buffer.from('2'),
      [TRIGGER_SOURCE_HEADERS.offset]: Buffer.from('17'),
      [TRIGGER_SOURCE_HEADERS.timestamp]: Buffer.from('1700000000000'),
    };
    const redriven = message({
      topic: 't.trigger.orders',
      partition: 0,
      offset: '3',
      timestamp: '1800000000000',
      headers,
    });
    const r = await triggerRecord(orders, codec, redriven);
    expect(r).toMatchObject({ topic: 'orders', partition: 2, offset: '17', timestamp: 1_700_000_000_000 });
    const original = await triggerRecord(orders, codec, message({}));
    expect(orders.runId(r)).toBe(orders.runId(original));
  });
});

describe('applied: what a record becomes', () => {
  it('a start gives run id, business key and the input checked against the workflow', () => {
    expect(applied(orders, record(), saga)).toEqual({
      kind: 'start',
      runId: 'orders:orders:2:17',
      businessKey: 'order-1',
      input: { orderId: 'o-1', total: 5 },
      workflow: saga,
    });
  });

  it.each([
    ['a number', () => 42],
    ['an empty string', () => ''],
    ['more than 1000 bytes', () => 'é'.repeat(501)],
  ])('a run id that is %s is TRIGGER_RECORD_UNMAPPABLE', async (_, runId) => {
    const def = startTrigger({ name: 'orders', topic: 'orders', workflow: saga, runId: runId as never });
    const e = await failure(() => applied(def, record(), saga));
    expect(e.code).toBe('TRIGGER_RECORD_UNMAPPABLE');
    expect(e.message).toMatch(/^runId returned/);
  });

  it('a business key that is not a string is TRIGGER_RECORD_UNMAPPABLE naming businessKey', async () => {
    const def = startTrigger({
      name: 'o',
      topic: 'orders',
      workflow: saga,
      businessKey: () => null as never,
    });
    const e = await failure(() => applied(def, record(), saga));
    expect(e.code).toBe('TRIGGER_RECORD_UNMAPPABLE');
    expect(e.message).toMatch(/^businessKey returned object/);
  });

  it('a trigger function that throws is TRIGGER_RECORD_UNMAPPABLE naming the function and its message', async () => {
    const def = startTrigger({
      name: 'orders',
      topic: 'orders',
      workflow: saga,
      input: (r) => (r.value as { missing: { x: 1 } }).missing.x,
    });
    const e = await failure(() => applied(def, record(), saga));
    expect(e.code).toBe('TRIGGER_RECORD_UNMAPPABLE');
    expect(e.message).toMatch(/^input threw: /);
    expect(e.cause).toBeInstanceOf(TypeError);
  });

  it('an input JSON cannot carry (a bigint) is TRIGGER_RECORD_UNMAPPABLE naming input', async () => {
    const def = startTrigger({ name: 'orders', topic: 'orders', workflow: saga, input: () => 1n });
    const e = await failure(() => applied(def, record(), saga));
    expect(e.code).toBe('TRIGGER_RECORD_UNMAPPABLE');
    expect(e.message).toMatch(/^input threw/);
  });

  it("an input failing the workflow's input schema is TRIGGER_INPUT_INVALID naming each path", async () => {
    const e = await failure(() => applied(orders, record({ value: { orderId: 7, total: -1 } }), saga));
    expect(e.code).toBe('TRIGGER_INPUT_INVALID');
    expect(e.message).toMatch(/^input does not match workflow order-saga v2: /);
    expect(e.message).toMatch(/orderId: /);
    expect(e.message).toMatch(/total: /);
  });

  const signal = (run: SignalTarget | (() => unknown)): TriggerDefinition =>
    signalTrigger({
      name: 'payments',
      topic: 'payments',
      signal: 'paid',
      run: (typeof run === 'function' ? run : () => run) as () => SignalTarget,
    });
  type SignalTarget = { runId: string } | { businessKey: string };

  it('a signal to {runId} targets that run, with the value as payload', () => {
    expect(applied(signal({ runId: 'r-1' }), record(), undefined)).toEqual({
      kind: 'signal',
      target: { runId: 'r-1' },
      payload: { orderId: 'o-1', total: 5 },
      signal: 'paid',
    });
  });

  it('a signal to {businessKey} targets the business key', () => {
    const a = applied(signal({ businessKey: 'order-1' }), record(), undefined);
    expect(a).toMatchObject({ kind: 'signal', target: { businessKey: 'order-1' } });
  });

  it.each([
    ['neither runId nor businessKey', () => ({})],
    ['null', () => null],
    ['a runId that is not a string', () => ({ runId: 5 })],
  ])('a signal target with %s is TRIGGER_RECORD_UNMAPPABLE', async (_, run) => {
    const e = await failure(() => applied(signal(run), record(), undefined));
    expect(e.code).toBe('TRIGGER_RECORD_UNMAPPABLE');
    expect(e.message).toMatch(/^run\(\)\.(runId|businessKey) returned/);
  });
});
