import { EventCodec } from '@keyflow/contracts';
import { TestNamespace } from '@keyflow/testing';
import type { Message } from '@keyflow/kafka';
import { DlqLedgerView, dlqRecordId, ensureDlqLedger, ledgerMessage, readDlqLedger } from '../../src';

jest.setTimeout(90_000);

/**
 * The orchestrator reads the DLQ ledger on each lag pass (every 30 s) and for the ops API's DLQ views and redrives:
 * a view kept in memory reads only the entries appended since its last read, so that costs the ledger's new entries,
 * not its 30 days of history, and it says what a whole read says.
 */
describe('DlqLedgerView: the DLQ ledger read once, then only what was appended', () => {
  const ns = new TestNamespace('ledger-view');
  const codec = new EventCodec({
    registryUrl: process.env.SCHEMA_REGISTRY_URL!,
    topicPrefix: `${ns.prefix}.`,
  });
  /** The codec, counting the ledger entries it decodes. */
  let decoded = 0;
  const counting = Object.assign(Object.create(codec) as EventCodec, {
    decode: (...args: Parameters<EventCodec['decode']>) => {
      decoded++;
      return codec.decode(...args);
    },
  });
  const dlq = `${ns.prefix}.task.charge.dlq`;
  const entry = (offset: number, action: 'REDRIVEN' | 'DISCARDED' = 'REDRIVEN') =>
    ledgerMessage(codec, {
      dlqTopic: dlq,
      partition: 0,
      offset: String(offset),
      recordTimestamp: 1_000 + offset,
      action,
      handledBy: 'test',
    });
  const append = async (messages: Array<Message & { topic: string }>) => {
    const producer = ns.kafka.producer();
    await producer.connect();
    await producer.send({
      topic: messages[0].topic,
      messages: messages.map(({ key, value }) => ({ key, value })),
    });
    await producer.disconnect();
  };
  afterAll(() => ns.cleanup());

  it('a second read decodes only the new entries, and applies them and tombstones as a whole read does', async () => {
    const view = new DlqLedgerView(ns.kafka, counting);
    expect((await view.refresh()).size).toBe(0); // no ledger topic yet: empty
    await ensureDlqLedger(ns.kafka, codec);
    await append(Array.from({ length: 50 }, (_, i) => entry(i)));
    expect((await view.refresh()).size).toBe(50);
    expect(decoded).toBe(50);

    const topic = entry(0).topic;
    await append([
      entry(50, 'DISCARDED'),
      entry(3, 'DISCARDED'), // a newer entry of a record named before
      { topic, key: dlqRecordId(dlq, 0, '7'), value: null }, // a tombstone: forgotten
    ]);
    decoded = 0;
    const after = await view.refresh();
    expect(decoded).toBe(2); // the two new entries (a tombstone decodes nothing), not the 52 records again
    expect(after.size).toBe(50);
    expect(after.get(dlqRecordId(dlq, 0, '3'))?.action).toBe('DISCARDED');
    expect(after.has(dlqRecordId(dlq, 0, '7'))).toBe(false);
    expect(new Map(after)).toEqual(new Map(await readDlqLedger(ns.kafka, codec)));

    decoded = 0;
    const [a, b] = await Promise.all([view.refresh(), view.refresh()]); // calls made together share one read
    expect(a).toBe(b);
    expect(decoded).toBe(0);
  });

  it('an entry committed before a call is in what it resolves with, even while an earlier read is going', async () => {
    const view = new DlqLedgerView(ns.kafka, codec);
    await view.refresh();
    const going = view.refresh(); // a read that takes its end offsets now (its consumer group joins for seconds)
    await append([entry(100, 'DISCARDED')]); // committed while it goes
    const after = await view.refresh();
    expect(after.get(dlqRecordId(dlq, 0, '100'))?.action).toBe('DISCARDED');
    await going;
  });
});
