/**
 * The kafkajs patch "coordinators kept" (libs/kafka/src/client/kafkajs-patch.ts): a transactional producer's
 * eosManager against a scripted cluster, so each coordinator move, timeout and lost answer is exact. The same on a
 * real 3-broker cluster: test/integration/leader-change.int.spec.ts.
 */
// eslint-disable-next-line @typescript-eslint/no-require-imports
const createEosManager = require('kafkajs/src/producer/eosManager') as (o: object) => EosManager;
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { createErrorFromCode } = require('kafkajs/src/protocol/error') as {
  createErrorFromCode(code: number): Error;
};
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { KafkaJSRequestTimeoutError } = require('kafkajs/src/errors') as {
  KafkaJSRequestTimeoutError: new (m: string) => Error;
};

interface EosManager {
  initProducerId(): Promise<void>;
  beginTransaction(): void;
  addPartitionsToTransaction(
    t: Array<{ topic: string; partitions: Array<{ partition: number }> }>,
  ): Promise<void>;
  commit(): Promise<void>;
}

const NOT_COORDINATOR = 16;
const CONCURRENT_TRANSACTIONS = 51;

/** A cluster whose transaction coordinator is node `coordinator`; `fail` scripts the next answers of a request type. */
function scriptedCluster() {
  const state = {
    coordinator: 1,
    lookups: 0,
    sent: [] as Array<{ node: number; api: string }>,
    fail: new Map<string, Error[]>(),
  };
  const answer = (node: number, api: string) => {
    state.sent.push({ node, api });
    const scripted = state.fail.get(api)?.shift();
    if (scripted) throw scripted;
    if (node !== state.coordinator) throw createErrorFromCode(NOT_COORDINATOR);
  };
  const broker = (node: number) => ({
    nodeId: node,
    initProducerId: async () => ({ producerId: 7, producerEpoch: 0 }),
    addPartitionsToTxn: async () => answer(node, 'AddPartitionsToTxn'),
    endTxn: async () => answer(node, 'EndTxn'),
  });
  const cluster = {
    refreshMetadataIfNecessary: async () => undefined,
    findGroupCoordinator: async () => {
      state.lookups++;
      return broker(state.coordinator);
    },
    findBroker: async ({ nodeId }: { nodeId: number }) => broker(nodeId),
  };
  return { state, cluster };
}

const quiet = { debug() {}, info() {}, warn() {}, error() {}, namespace: () => quiet };

async function producer() {
  const { state, cluster } = scriptedCluster();
  const eos = createEosManager({
    logger: quiet,
    cluster,
    transactionTimeout: 1_000,
    transactional: true,
    transactionalId: 'tx',
  });
  await eos.initProducerId();
  const transaction = async (partition = 0) => {
    eos.beginTransaction();
    await eos.addPartitionsToTransaction([{ topic: 't', partitions: [{ partition }] }]);
    await eos.commit();
  };
  return { state, transaction };
}

describe("a transactional producer's coordinator (kafkajs patch: coordinators kept)", () => {
  it('is looked up once for many transactions', async () => {
    const { state, transaction } = await producer();
    for (let i = 0; i < 5; i++) await transaction();
    expect(state.lookups).toBe(1); // initProducerId's; unpatched: 1 + 2 per transaction
    expect(state.sent).toHaveLength(10);
  });

  it('is found again when it moved, and the refused request is sent to the new one', async () => {
    const { state, transaction } = await producer();
    await transaction();
    state.coordinator = 2;
    await transaction();
    expect(state.lookups).toBe(2);
    expect(state.sent.slice(2).map((s) => `${s.api}@${s.node}`)).toEqual([
      'AddPartitionsToTxn@1',
      'AddPartitionsToTxn@2',
      'EndTxn@2',
    ]);
  });

  it('is found again after a request timeout (a half-open connection to a dead broker)', async () => {
    const { state, transaction } = await producer();
    await transaction();
    state.coordinator = 2;
    state.fail.set('AddPartitionsToTxn', [
      new KafkaJSRequestTimeoutError('Request AddPartitionsToTxn timed out'),
    ]);
    await transaction();
    expect(state.sent.slice(2).map((s) => `${s.api}@${s.node}`)).toEqual([
      'AddPartitionsToTxn@1',
      'AddPartitionsToTxn@2',
      'EndTxn@2',
    ]);
  });

  it('commits when an applied EndTxn lost its answer and the one sent again meets the markers being written', async () => {
    const { state, transaction } = await producer();
    await transaction();
    state.fail.set('EndTxn', [
      new KafkaJSRequestTimeoutError('Request EndTxn timed out'), // applied; its answer lost
      createErrorFromCode(CONCURRENT_TRANSACTIONS), // sent again while the coordinator writes the markers
      createErrorFromCode(CONCURRENT_TRANSACTIONS),
    ]);
    await transaction(); // unpatched: throws the timeout; without the settling retries, CONCURRENT_TRANSACTIONS
    expect(state.sent.slice(2).map((s) => `${s.api}@${s.node}`)).toEqual([
      'AddPartitionsToTxn@1',
      'EndTxn@1',
      'EndTxn@1',
      'EndTxn@1',
      'EndTxn@1',
    ]);
    await transaction(); // and the producer is usable again (not left COMMITTING)
  });
});
