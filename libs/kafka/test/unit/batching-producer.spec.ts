import type { Producer } from 'kafkajs';
import { BatchingProducer, messageBytes } from '../../src';

/** A producer whose sendBatch calls are recorded and answered when the test says. */
function fakeProducer() {
  const calls: Array<{ values: string[]; done: () => void; fail: (e: Error) => void }> = [];
  const producer = {
    sendBatch: ({ topicMessages }: { topicMessages: Array<{ messages: Array<{ value: string }> }> }) =>
      new Promise<void>((done, fail) =>
        calls.push({ values: topicMessages.flatMap((t) => t.messages.map((m) => m.value)), done, fail }),
      ),
  } as unknown as Producer;
  return { producer, calls };
}
const turn = () => new Promise((r) => setImmediate(r));

describe('BatchingProducer', () => {
  it('sends made in one turn share a request; those made while it is in flight go together in the next, in order', async () => {
    const { producer, calls } = fakeProducer();
    const b = new BatchingProducer(producer);
    const acked: string[] = [];
    const send = (v: string) => b.send('t', { value: v }).then(() => void acked.push(v));
    const first = [send('a'), send('b')];
    await turn();
    expect(calls.map((c) => c.values)).toEqual([['a', 'b']]);
    const later = [send('c'), send('d'), send('e')];
    await turn();
    expect(calls).toHaveLength(1); // one request in flight at a time
    calls[0].done();
    await Promise.all(first);
    await turn();
    expect(calls.map((c) => c.values)).toEqual([
      ['a', 'b'],
      ['c', 'd', 'e'],
    ]);
    calls[1].done();
    await Promise.all(later);
    expect(acked).toEqual(['a', 'b', 'c', 'd', 'e']);
  });

  it('a failed request rejects its own messages only, and the next request still goes', async () => {
    const { producer, calls } = fakeProducer();
    const b = new BatchingProducer(producer, { maxBatch: 2 });
    const results = ['a', 'b', 'c'].map((v) =>
      b.send('t', { value: v }).then(
        () => 'ok',
        (e: Error) => e.message,
      ),
    );
    await turn();
    expect(calls.map((c) => c.values)).toEqual([['a', 'b']]); // at most maxBatch per request
    calls[0].fail(new Error('broker down'));
    await turn();
    expect(calls.map((c) => c.values)).toEqual([['a', 'b'], ['c']]);
    calls[1].done();
    expect(await Promise.all(results)).toEqual(['broker down', 'broker down', 'ok']);
  });

  it('a request holds at most maxBytes: messages that together exceed it go in the next; a bigger one goes alone', async () => {
    const { producer, calls } = fakeProducer();
    // messageBytes: 64 bytes of record overhead plus the value: 68, 68, 68, 80 and 65 bytes.
    const b = new BatchingProducer(producer, { maxBatch: 100, maxBytes: 140 });
    const sent = ['aaaa', 'bbbb', 'cccc', 'dddddddddddddddd', 'e'].map((v) => b.send('t', { value: v }));
    for (let i = 0; i < 4; i++) {
      await turn();
      calls[i].done();
    }
    await Promise.all(sent);
    expect(calls.map((c) => c.values)).toEqual([['aaaa', 'bbbb'], ['cccc'], ['dddddddddddddddd'], ['e']]);
  });

  it("a failed request drops its groups' messages still waiting: sending the group again keeps its order", async () => {
    const { producer, calls } = fakeProducer();
    const b = new BatchingProducer(producer, { maxBatch: 2 });
    const group = b.sendAll(
      't',
      ['a', 'b', 'c'].map((value) => ({ value })),
    );
    const other = b.send('t', { value: 'x' });
    await turn();
    calls[0].fail(new Error('broker down'));
    await expect(group).rejects.toThrow('broker down');
    await turn();
    calls[1].done();
    await other;
    expect(calls.map((c) => c.values)).toEqual([['a', 'b'], ['x']]); // 'c' was not sent after the failure
  });

  it('refuses bounds that would send nothing or bound nothing', () => {
    const { producer } = fakeProducer();
    expect(() => new BatchingProducer(producer, { maxBatch: 0 })).toThrow(RangeError);
    expect(() => new BatchingProducer(producer, { maxBatch: 10, maxBytes: Number.NaN })).toThrow(RangeError);
  });

  it('messageBytes counts key, value, every header (array values once per element) and the record overhead', () => {
    const bare = messageBytes({ value: null });
    expect(messageBytes({ key: 'k', value: 'é' })).toBe(bare + 1 + 2); // UTF-8 bytes
    const one = messageBytes({ value: null, headers: { h: Buffer.alloc(100) } });
    expect(messageBytes({ value: null, headers: { h: [Buffer.alloc(100), Buffer.alloc(100)] } })).toBe(
      bare + 2 * (one - bare),
    );
  });

  it('sendAll resolves once every message of the group is acknowledged, across requests, in order', async () => {
    const { producer, calls } = fakeProducer();
    const b = new BatchingProducer(producer, { maxBatch: 2 });
    let settled = false;
    const all = b
      .sendAll(
        't',
        ['a', 'b', 'c'].map((value) => ({ value })),
      )
      .then(() => (settled = true));
    await turn();
    calls[0].done();
    await turn();
    expect(settled).toBe(false); // 'c' is still in flight
    expect(calls.map((c) => c.values)).toEqual([['a', 'b'], ['c']]);
    calls[1].done();
    await all;
    expect(settled).toBe(true);
  });
});
