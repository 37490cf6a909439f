/**
 * The kafkajs patch "coordinator one at a time" (libs/kafka/src/client/kafkajs-patch.ts) and sendWithOffsets: a
 * transaction's records and offsets sent together through kafkajs's own sendMessages and eosManager, against a
 * scripted cluster whose every request waits until the test answers it, so the order and overlap are exact.
 */
import { sendOffsetsFirst, sendWithOffsets } from '../../src/client/client';
// eslint-disable-next-line @typescript-eslint/no-require-imports
const createEosManager = require('kafkajs/src/producer/eosManager') as (o: object) => EosManager;
// eslint-disable-next-line @typescript-eslint/no-require-imports
const createSendMessages = require('kafkajs/src/producer/sendMessages') as (o: object) => SendMessages;
// eslint-disable-next-line @typescript-eslint/no-require-imports
const createRetry = require('kafkajs/src/retry') as (o: object) => unknown;
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { createErrorFromCode } = require('kafkajs/src/protocol/error') as {
  createErrorFromCode(code: number): Error;
};

interface EosManager {
  initProducerId(): Promise<void>;
  beginTransaction(): void;
  sendOffsets(o: object): Promise<void>;
  commit(): Promise<void>;
  abort(): Promise<void>;
}
type SendMessages = (o: {
  acks: number;
  topicMessages: Array<{ topic: string; messages: Array<{ value: Buffer; partition: number }> }>;
}) => Promise<unknown>;

const CONCURRENT_TRANSACTIONS = 51;
const COORDINATOR_APIS = new Set(['AddPartitionsToTxn', 'AddOffsetsToTxn', 'EndTxn']);

/** A one-broker cluster; each request is held in `pending` until `settle(api)` answers it (`settle(api, code)` refuses). */
function heldCluster() {
  const pending: Array<{ api: string; settle: (e?: Error) => void }> = [];
  const log: string[] = [];
  let coordinatorInFlight = 0;
  let maxCoordinatorInFlight = 0;
  /** Called on each request sent (settle's wait for one). */
  let onSent = () => {};
  const request = (api: string, result: unknown = {}) =>
    new Promise((resolve, reject) => {
      log.push(`${api} sent`);
      queueMicrotask(() => onSent());
      const coordinator = COORDINATOR_APIS.has(api);
      if (coordinator) maxCoordinatorInFlight = Math.max(maxCoordinatorInFlight, ++coordinatorInFlight);
      pending.push({
        api,
        settle: (e) => {
          if (coordinator) coordinatorInFlight--;
          log.push(`${api} ${e ? 'refused' : 'answered'}`);
          if (e) reject(e);
          else resolve(result);
        },
      });
    });
  const broker = {
    nodeId: 1,
    initProducerId: async () => ({ producerId: 7, producerEpoch: 0 }),
    addPartitionsToTxn: () => request('AddPartitionsToTxn'),
    addOffsetsToTxn: () => request('AddOffsetsToTxn'),
    txnOffsetCommit: () => request('TxnOffsetCommit'),
    endTxn: () => request('EndTxn'),
    produce: () =>
      request('Produce', {
        topics: [{ topicName: 't', partitions: [{ partition: 0, errorCode: 0, baseOffset: '0' }] }],
      }),
  };
  const cluster = {
    refreshMetadataIfNecessary: async () => undefined,
    addMultipleTargetTopics: async () => undefined,
    refreshMetadata: async () => undefined,
    isConnected: () => true,
    findTopicPartitionMetadata: () => [{ partitionId: 0, leader: 1 }],
    findLeaderForPartitions: () => ({ 1: [0] }),
    findGroupCoordinator: async () => broker,
    findBroker: async () => broker,
  };
  /**
   * Waits until `api` is in flight (a retry's is sent after kafkajs's retry backoff, a timer: the wait is for the
   * request, up to 2 s, within the test's own 5 s, not a count of event-loop turns), then answers it (or refuses it
   * with `code`).
   */
  const settle = async (api: string, code?: number) => {
    if (!pending.some((p) => p.api === api))
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 2_000);
        onSent = () => {
          if (!pending.some((p) => p.api === api)) return;
          clearTimeout(timer);
          resolve();
        };
      });
    onSent = () => {};
    const at = pending.findIndex((p) => p.api === api);
    if (at < 0) throw new Error(`${api} never sent; log: ${log.join(', ')}`);
    const [p] = pending.splice(at, 1);
    p.settle(code === undefined ? undefined : createErrorFromCode(code));
  };
  /** Answers the oldest request in flight, if any. */
  const settleNext = async () => pending.shift()?.settle();
  return { cluster, log, settle, settleNext, maxInFlight: () => maxCoordinatorInFlight };
}

const quiet = { debug() {}, info() {}, warn() {}, error() {}, namespace: () => quiet };

async function transactionalProducer() {
  const held = heldCluster();
  const eos = createEosManager({
    logger: quiet,
    cluster: held.cluster,
    transactionTimeout: 1_000,
    transactional: true,
    transactionalId: 'tx',
  });
  await eos.initProducerId();
  const sendMessages = createSendMessages({
    logger: quiet,
    cluster: held.cluster,
    partitioner: () => 0,
    eosManager: eos,
    retrier: createRetry({ retries: 3, initialRetryTime: 1, maxRetryTime: 5 }),
  });
  const send = () =>
    sendMessages({
      acks: -1,
      topicMessages: [{ topic: 't', messages: [{ value: Buffer.from('x'), partition: 0 }] }],
    });
  const offsets = () =>
    eos.sendOffsets({
      consumerGroupId: 'g',
      topics: [{ topic: 'in', partitions: [{ partition: 0, offset: '1' }] }],
    });
  return { ...held, eos, send, offsets };
}

describe("a transaction's records and offsets sent together (kafkajs patch: coordinator one at a time)", () => {
  it('adds the partitions first, then overlaps the produce with the offsets, one coordinator request at a time', async () => {
    const p = await transactionalProducer();
    p.eos.beginTransaction();
    const both = sendWithOffsets([p.send], p.offsets);
    await p.settle('AddPartitionsToTxn');
    await p.settle('AddOffsetsToTxn');
    await p.settle('TxnOffsetCommit'); // answered while the produce is still in flight
    await p.settle('Produce');
    await both;
    const commit = p.eos.commit();
    await p.settle('EndTxn');
    await commit;
    expect(p.log).toEqual([
      'AddPartitionsToTxn sent',
      'AddPartitionsToTxn answered',
      'Produce sent',
      'AddOffsetsToTxn sent',
      'AddOffsetsToTxn answered',
      'TxnOffsetCommit sent',
      'TxnOffsetCommit answered',
      'Produce answered',
      'EndTxn sent',
      'EndTxn answered',
    ]);
    expect(p.maxInFlight()).toBe(1);
  });

  it('offsets sent first (while the batch is processed) go before the partitions, and the produce follows AddPartitionsToTxn, one coordinator request at a time', async () => {
    const p = await transactionalProducer();
    p.eos.beginTransaction();
    const offsets = sendOffsetsFirst(p.offsets);
    await p.settle('AddOffsetsToTxn');
    await p.settle('TxnOffsetCommit'); // answered before the batch's records exist
    const both = sendWithOffsets([p.send], offsets);
    await p.settle('AddPartitionsToTxn');
    await p.settle('Produce');
    await both;
    const commit = p.eos.commit();
    await p.settle('EndTxn');
    await commit;
    // Each request answered before the next is sent.
    expect(p.log).toEqual(
      ['AddOffsetsToTxn', 'TxnOffsetCommit', 'AddPartitionsToTxn', 'Produce', 'EndTxn'].flatMap((api) => [
        `${api} sent`,
        `${api} answered`,
      ]),
    );
    expect(p.maxInFlight()).toBe(1);
  });

  it('records begun while the offsets sent first are still in flight wait for AddOffsetsToTxn before their AddPartitionsToTxn', async () => {
    const p = await transactionalProducer();
    p.eos.beginTransaction();
    const offsets = sendOffsetsFirst(p.offsets);
    const both = sendWithOffsets([p.send], offsets);
    await p.settle('AddOffsetsToTxn');
    await p.settle('AddPartitionsToTxn');
    await p.settle('TxnOffsetCommit');
    await p.settle('Produce');
    await both;
    expect(p.maxInFlight()).toBe(1);
    expect(p.log.indexOf('AddPartitionsToTxn sent')).toBeGreaterThan(
      p.log.indexOf('AddOffsetsToTxn answered'),
    );
  });

  it('a transaction given up after its offsets were sent first aborts once they settled, and nothing of it commits', async () => {
    const p = await transactionalProducer();
    p.eos.beginTransaction();
    const offsets = sendOffsetsFirst(p.offsets);
    // The batch's processing then fails: its caller aborts once the offsets' requests settled (the TxnOffsetCommit goes
    // to the group coordinator, which the patched abort does not wait for).
    const abort = offsets.then(() => p.eos.abort());
    await p.settle('AddOffsetsToTxn');
    await p.settle('TxnOffsetCommit');
    await p.settle('EndTxn');
    await abort;
    expect(p.log.indexOf('EndTxn sent')).toBeGreaterThan(p.log.indexOf('TxnOffsetCommit answered'));
    const before = p.log.length;
    p.eos.beginTransaction();
    await p.eos.commit();
    expect(p.log.slice(before)).toEqual([]);
  });

  it('sends AddOffsetsToTxn once, after a refused AddPartitionsToTxn was taken on retry, never two at once', async () => {
    const p = await transactionalProducer();
    p.eos.beginTransaction();
    const both = sendWithOffsets([p.send], p.offsets);
    // The previous markers are still being written: refused three times, then taken (kafkajs's send retries).
    for (let i = 0; i < 3; i++) await p.settle('AddPartitionsToTxn', CONCURRENT_TRANSACTIONS);
    await p.settle('AddPartitionsToTxn');
    await p.settle('AddOffsetsToTxn');
    await p.settle('TxnOffsetCommit');
    await p.settle('Produce');
    await both;
    expect(p.maxInFlight()).toBe(1);
    expect(p.log.filter((l) => l === 'AddOffsetsToTxn sent')).toHaveLength(1);
    expect(p.log.indexOf('AddOffsetsToTxn sent')).toBeGreaterThan(
      p.log.indexOf('AddPartitionsToTxn answered'),
    );
  });

  it('an abort while the offsets wait for the partitions ends the transaction after them: nothing of it commits later', async () => {
    const p = await transactionalProducer();
    p.eos.beginTransaction();
    const sent = p.send().catch(() => undefined);
    const offsets = p.offsets().catch((e: Error) => e);
    const abort = p.eos.abort(); // a caller that does not wait for its requests (sendWithOffsets does)
    let aborted = false;
    void abort.then(() => (aborted = true));
    while (!aborted) {
      await p.settleNext();
      await new Promise((r) => setTimeout(r, 1));
    }
    await Promise.all([sent, offsets]);
    const endTxn = p.log.indexOf('EndTxn sent');
    expect(endTxn).toBeGreaterThan(p.log.indexOf('AddPartitionsToTxn answered')); // unpatched: no EndTxn at all
    for (const api of ['AddOffsetsToTxn', 'TxnOffsetCommit'])
      expect(p.log.lastIndexOf(`${api} sent`)).toBeLessThan(endTxn);
    const before = p.log.length;
    p.eos.beginTransaction();
    await p.eos.commit(); // nothing sent in it: no EndTxn, so nothing of the aborted one is committed
    expect(p.log.slice(before)).toEqual([]);
  });

  it('settles both before it throws, so the abort that follows has nothing in flight', async () => {
    const p = await transactionalProducer();
    p.eos.beginTransaction();
    const both = sendWithOffsets([p.send], p.offsets);
    const outcome = both.then(
      () => 'resolved',
      (e: Error) => e.message,
    );
    await p.settle('AddPartitionsToTxn');
    await p.settle('AddOffsetsToTxn');
    await p.settle('TxnOffsetCommit', 25); // UNKNOWN_MEMBER_ID: not retriable for TxnOffsetCommit
    let settled = false;
    void outcome.then(() => (settled = true));
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    expect(settled).toBe(false); // the produce is still in flight
    await p.settle('Produce');
    expect(await outcome).toMatch(/member/i);
    const abort = p.eos.abort();
    await p.settle('EndTxn');
    await abort;
  });
});
