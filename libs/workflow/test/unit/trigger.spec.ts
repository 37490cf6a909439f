import {
  DEFAULT_AWAIT_RUN_MS,
  DEFAULT_TRIGGER_MAX_IN_FLIGHT,
  InvalidTriggerError,
  signalTrigger,
  startTrigger,
  workflow,
  type TriggerRecord,
} from '../../src';

const saga = workflow('order-saga', 1).task('charge', { type: 'charge' }).build();
const record = (r: Partial<TriggerRecord> = {}): TriggerRecord => ({
  topic: 'orders',
  partition: 3,
  offset: '1234567890123',
  key: 'order-1',
  value: { orderId: 'o-1' },
  headers: {},
  timestamp: 1_700_000_000_000,
  ...r,
});
const start = (o: object = {}) => startTrigger({ name: 'orders', topic: 'orders', workflow: saga, ...o });
const signal = (o: object = {}) =>
  signalTrigger({ name: 'payments', topic: 'payments', signal: 'paid', run: () => ({ runId: 'r' }), ...o });

/** The InvalidTriggerError `f` throws. */
function invalid(f: () => unknown): InvalidTriggerError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidTriggerError);
    expect((e as InvalidTriggerError).code).toBe('INVALID_TRIGGER');
    expect((e as InvalidTriggerError).retryable).toBe(false);
    return e as InvalidTriggerError;
  }
  throw new Error('did not throw');
}

describe('trigger definitions: options that could never work throw InvalidTriggerError', () => {
  it.each(['', 'Orders', 'orders_1', '-orders', 'a'.repeat(101), 'ord ers'])('name %j', (name) => {
    expect(invalid(() => start({ name })).message).toMatch(/name must match/);
    invalid(() => signal({ name }));
  });

  it('a name of 100 characters is taken', () => {
    expect(start({ name: 'a'.repeat(100) }).name).toBe('a'.repeat(100));
  });

  it.each(['', 'or ders', 'orders/1', 'ö', 'a'.repeat(250), '.', '..'])(
    'topic %j (not a Kafka topic name)',
    (topic) => {
      expect(invalid(() => start({ topic })).message).toMatch(/is not a Kafka topic name/);
      invalid(() => signal({ topic }));
    },
  );

  it('topics of 249 characters of [a-zA-Z0-9._-] are taken', () => {
    expect(start({ topic: 'A.b_c-9' }).topic).toBe('A.b_c-9');
    expect(start({ topic: 'x'.repeat(249) }).topic).toBe('x'.repeat(249));
  });

  it.each([0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY])('maxInFlight %p', (maxInFlight) => {
    expect(invalid(() => start({ maxInFlight })).message).toMatch(/maxInFlight/);
    invalid(() => signal({ maxInFlight }));
  });

  it('format other than auto, avro or json', () => {
    expect(invalid(() => start({ format: 'protobuf' })).message).toMatch(/format/);
  });

  it('serializeBy other than offset or key', () => {
    expect(invalid(() => start({ serializeBy: 'run' })).message).toMatch(/serializeBy/);
  });

  it('an empty group', () => {
    invalid(() => start({ group: '' }));
  });

  it('an empty workflow name', () => {
    invalid(() => start({ workflow: '' }));
  });

  it.each([-1, Number.NaN])('awaitRunMs %p', (awaitRunMs) => {
    expect(invalid(() => signal({ awaitRunMs })).message).toMatch(/awaitRunMs/);
  });

  it('an empty signal name', () => {
    invalid(() => signal({ signal: '' }));
  });
});

describe('trigger definitions: defaults', () => {
  it('a start trigger reads auto, 1000 in flight, offset order, the default group, the workflow by name', () => {
    const d = start();
    expect(d).toMatchObject({
      kind: 'start',
      name: 'orders',
      topic: 'orders',
      group: null,
      format: 'auto',
      maxInFlight: DEFAULT_TRIGGER_MAX_IN_FLIGHT,
      serializeBy: 'offset',
      workflow: 'order-saga',
    });
    expect(start({ workflow: 'by-name' }).workflow).toBe('by-name');
  });

  it('the default run id is <name>:<topic>:<partition>:<offset> (stable on replay)', () => {
    expect(start().runId(record())).toBe('orders:orders:3:1234567890123');
  });

  it('the default business key is the record key, else the run id', () => {
    expect(start().businessKey(record())).toBe('order-1');
    expect(start().businessKey(record({ key: null }))).toBe('orders:orders:3:1234567890123');
    const custom = start({
      runId: (r: TriggerRecord) => `order:${(r.value as { orderId: string }).orderId}`,
    });
    expect(custom.businessKey(record({ key: null }))).toBe('order:o-1');
  });

  it('a record with an empty key gets the run id as default business key (an empty key is no key)', () => {
    expect(start().businessKey(record({ key: '' }))).toBe('orders:orders:3:1234567890123');
  });

  it('the default input and payload are the record value', () => {
    expect(start().input(record())).toEqual({ orderId: 'o-1' });
    expect(signal().payload(record())).toEqual({ orderId: 'o-1' });
  });

  it('a signal trigger waits 30 s for its run by default; 0 is taken', () => {
    expect(signal()).toMatchObject({ kind: 'signal', signal: 'paid', awaitRunMs: DEFAULT_AWAIT_RUN_MS });
    expect(DEFAULT_AWAIT_RUN_MS).toBe(30_000);
    expect(signal({ awaitRunMs: 0 }).awaitRunMs).toBe(0);
  });

  it('given options are kept', () => {
    const d = start({ group: 'billing', format: 'json', maxInFlight: 5, serializeBy: 'key' });
    expect(d).toMatchObject({ group: 'billing', format: 'json', maxInFlight: 5, serializeBy: 'key' });
  });
});
