import { EventCodec } from '@keyflow/contracts';
import { TestNamespace } from '@keyflow/testing';
import type { Message } from '@keyflow/kafka';
import {
  DlqLedgerView,
  dlqRecordId,
  ensureDlqLedger,
  HandledOffsets,
  ledgerMessage,
  readDlqLedger,
  summarizeDlqs,
  type HandledEntry,
} from '../../src';

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
    // Its offsets per DLQ partition (the lag pass counts a large partition's handled records with them) follow the
    // entries: the new offset 50 in, the forgotten 7 out.
    for (const [low, end] of [
      [0n, 51n],
      [0n, 8n],
      [7n, 8n],
      [50n, 100n],
    ])
      expect(view.offsets.countIn(dlq, 0, low, end)).toBe(HandledOffsets.of(after).countIn(dlq, 0, low, end));
    expect(view.offsets.countIn(dlq, 0, 0n, 51n)).toBe(50);
    expect(view.offsets.countIn(dlq, 0, 7n, 8n)).toBe(0);

    decoded = 0;
    const [a, b] = await Promise.all([view.refresh(), view.refresh()]); // calls made together share one read
    expect(a).toBe(b);
    expect(decoded).toBe(0);
  });

  it("a DLQ partition too large to read is counted from the view's offsets, never by walking the ledger", async () => {
    // What the orchestrator's lag pass does every 30 s: the ledger holds up to 30 days of entries; walking them once
    // per large DLQ partition on the event loop grew with history. A ledger map that refuses to be walked.
    const walked = () => {
      throw new Error('the ledger was walked');
    };
    const handled = Object.assign(new Map<string, HandledEntry>(), {
      keys: walked,
      values: walked,
      entries: walked,
      forEach: walked,
      [Symbol.iterator]: walked,
    });
    const [big] = await ns.createTopics({ name: 'task.big.dlq', numPartitions: 1 });
    const producer = ns.kafka.producer();
    await producer.connect();
    await producer.send({ topic: big, messages: Array.from({ length: 5 }, (_, i) => ({ value: `r${i}` })) });
    await producer.disconnect();
    const offsets = new HandledOffsets();
    offsets.add(dlqRecordId(big, 0, '1'));
    offsets.add(dlqRecordId(big, 0, '3'));
    const [summary] = await summarizeDlqs(ns.kafka, [big], {
      exactUpTo: 2,
      handled,
      handledOffsets: offsets,
    });
    expect(summary).toMatchObject({ records: 5, pending: 3, exact: false });
    // Without the offsets the summary indexes the map itself, once: here that walk is refused.
    await expect(summarizeDlqs(ns.kafka, [big], { exactUpTo: 2, handled })).rejects.toThrow('walked');
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
