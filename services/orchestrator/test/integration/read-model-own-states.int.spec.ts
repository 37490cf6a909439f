import { EventCodec } from '@keyflow/contracts';
import { createLogger } from '@keyflow/observability';
import { TestNamespace } from '@keyflow/testing';
import { snapshotParts, type RunState } from '@keyflow/workflow';
import { oneWfStatePartition, smallRunState, snapshotValue } from '../fixtures/run-states';
import { BARRIER_PREFIX, RunReadModel, workflowStats } from '../../src/engine/read-model';
import { CHAIN_ACCURACY, CHAIN_WINDOW_MS } from '../../src/engine/chain-times';

jest.setTimeout(120_000);

/**
 * The read model takes the states its own instance's engine committed as they are when it reads their snapshot
 * records, instead of decoding their JSON again (issue 44: the burst's orchestrator spent 4-13 % of its main thread
 * there); every other record is decoded as before, and what it holds of a run is the same either way.
 */
describe("the read model and its own engine's committed states", () => {
  const ns = new TestNamespace('own-states');
  const codec = new EventCodec({ registryUrl: ns.infra.schemaRegistryUrl, topicPrefix: `${ns.prefix}.` });
  let rm: RunReadModel;
  let nonce = 0;
  const CAUSE = 'input-1';
  const mine = (...states: RunState[]) => states.map((state) => ({ state, cause: CAUSE }));
  const state = (runId: string, sequence: number, n: number) => smallRunState(runId, sequence, n);
  /** The engine's snapshot of `s`, caused by the input whose event id is `cause`. */
  const record = (s: RunState, cause = CAUSE) => ({
    key: s.runId,
    partition: 0,
    value: snapshotValue(codec, { ...s, state: snapshotParts(s, undefined).core, causationId: cause }),
  });
  /** Writes `records` and a barrier behind them, and waits until the read model has read them all. */
  const write = async (records: Array<{ key: string; partition: number; value: Buffer | null }>) => {
    const id = `n${++nonce}`;
    const barrier = {
      key: `${BARRIER_PREFIX}0`,
      partition: 0,
      value: snapshotValue(codec, { runId: `${BARRIER_PREFIX}0`, sequence: 0, status: 'barrier', state: id }),
    };
    const producer = ns.kafka.producer();
    await producer.connect();
    await producer.send({ topic: codec.physical('wf.state'), messages: [...records, barrier] });
    await producer.disconnect();
    await rm.waitForBarrier(0, id, 30_000);
  };

  beforeAll(async () => {
    await oneWfStatePartition(ns, codec);
    rm = new RunReadModel(
      ns.kafka,
      codec,
      ns.groupId('read-model'),
      createLogger('test', { level: 'silent' }),
    );
    await rm.start();
  });
  afterAll(async () => {
    await rm?.stop();
    await ns.cleanup();
  });

  it('a record of a state committed here, or an older record of its run, is taken as that state; one of a later sequence is decoded', async () => {
    const own = state('own', 3, 1);
    const ahead = state('ahead', 4, 1);
    rm.committedHere(mine(own, ahead));
    expect(rm.ownStatesWaiting()).toBe(2);
    const [read, taken] = [rm.snapshotsRead, rm.snapshotsOwn];
    // `own`: an older record first (in a batch of its own, or its own record would supersede it unread): the state
    // committed here is held from then on; its own record changes nothing. `ahead`: a later sequence, written by a
    // new owner of the partition, decoded.
    await write([record(state('own', 2, 0))]);
    expect(rm.get('own')).toBe(own);
    expect(rm.ownStatesWaiting()).toBe(2);
    const changes: RunState[] = [];
    rm.onRunChange((s) => changes.push(s));
    await write([record(own), record(state('ahead', 5, 2))]);
    expect(rm.get('own')).toBe(own);
    expect(rm.get('ahead')).not.toBe(ahead);
    expect(rm.get('ahead')).toMatchObject({ sequence: 5, input: { n: 2 } });
    expect(changes.map((s) => s.runId)).toEqual(['ahead']); // not `own` again
    expect(rm.snapshotsRead - read).toBe(3); // the barriers are not counted
    expect(rm.snapshotsOwn - taken).toBe(2);
    expect(rm.ownStatesWaiting()).toBe(0);
  });

  it('a state whose record was read before it was handed over, a parked start (sequence 0) and a run tombstoned are not kept', async () => {
    const early = state('early', 2, 1);
    await write([record(early)]);
    rm.committedHere(mine(state('early', 2, 1), state('early-parked', 0, 1)));
    expect(rm.ownStatesWaiting()).toBe(0);
    rm.committedHere(mine(state('gone', 1, 1)));
    expect(rm.ownStatesWaiting()).toBe(1);
    await write([{ key: 'gone', partition: 0, value: null }]);
    expect(rm.ownStatesWaiting()).toBe(0);
    expect(rm.get('gone')).toBeUndefined();
  });

  it('a record of the same run and sequence with another cause (a different state another owner committed) is decoded, and replaces one taken early', async () => {
    // An unpark whose inputs were all ignored keeps the sequence: P here, then U by the partition's next owner.
    const p = state('unparked', 4, 1);
    rm.committedHere(mine(p));
    await write([record(state('unparked', 3, 0))]);
    expect(rm.get('unparked')).toBe(p); // taken early, from an older record
    await write([record(state('unparked', 4, 2), 'timer-fired-1')]);
    expect(rm.get('unparked')).toMatchObject({ sequence: 4, input: { n: 2 } });
    expect(rm.ownStatesWaiting()).toBe(0);
    // Both records in one fetched batch: the engine's is superseded unread, the other owner's decoded.
    const q = state('unparked-2', 4, 1);
    rm.committedHere(mine(q));
    await write([record(q), record(state('unparked-2', 4, 2), 'timer-fired-2')]);
    expect(rm.get('unparked-2')).toMatchObject({ sequence: 4, input: { n: 2 } });
    expect(rm.ownStatesWaiting()).toBe(0);
  });

  it("the overview's figures, kept as runs change, are what a walk of every run held gives", async () => {
    const now = Date.now();
    const ended = (
      runId: string,
      sequence: number,
      workflow: string,
      startedAt: number,
      endedAt: number,
    ) => ({
      ...state(runId, sequence, 0),
      workflow,
      status: 'completed' as const,
      startedAt,
      endedAt,
    });
    // Ended in the window (two workflows), ended before it, ended then retried (running again), ended then forgotten.
    await write([
      record(ended('w1', 2, 'alpha', now - 500, now - 100)),
      record(ended('w2', 2, 'alpha', now - 900, now - 200)),
      record(ended('w3', 2, 'beta', now - 300, now - 10)),
      record(ended('old', 2, 'beta', now - 3 * CHAIN_WINDOW_MS, now - 2 * CHAIN_WINDOW_MS)),
      record(ended('again', 2, 'beta', now - 50, now - 40)),
      record(ended('gone', 2, 'alpha', now - 70, now - 60)),
    ]);
    await write([
      record({ ...state('again', 3, 0), workflow: 'beta', startedAt: now - 50 }),
      { key: 'gone', partition: 0, value: null },
    ]);
    const at = Date.now();
    const stats = rm.workflowStats(at);
    expect(stats).toEqual(workflowStats(rm.inPartition(0), at));
    const alpha = stats.find((w) => w.workflow === 'alpha')!;
    const beta = stats.find((w) => w.workflow === 'beta')!;
    expect([alpha.ended, beta.ended]).toEqual([2, 1]);
    const within = (got: number | null, want: number) =>
      expect(Math.abs(got! - want)).toBeLessThanOrEqual(Math.ceil(want * CHAIN_ACCURACY));
    within(alpha.chainP50Ms, 400);
    within(alpha.chainP95Ms, 700);
    within(beta.chainP50Ms, 290);
  });
  it('a business key names its newest run not ended, as runs of it end, run again and are forgotten', async () => {
    const run = (runId: string, sequence: number, status: RunState['status'], startedAt: number) => ({
      ...state(runId, sequence, 0),
      businessKey: 'order-7',
      status,
      startedAt,
      ...(status === 'completed' ? { endedAt: startedAt + 5 } : {}),
    });
    await write([record(run('k1', 1, 'running', 10)), record(run('k2', 1, 'running', 20))]);
    expect(rm.runByBusinessKey('order-7')?.runId).toBe('k2');
    await write([record(run('k2', 2, 'completed', 20))]);
    expect(rm.runByBusinessKey('order-7')?.runId).toBe('k1');
    await write([record(run('k1', 2, 'completed', 10))]);
    expect(rm.runByBusinessKey('order-7')).toBeUndefined();
    await write([record(run('k2', 3, 'running', 20))]); // retried: it runs again
    expect(rm.runByBusinessKey('order-7')?.runId).toBe('k2');
    await write([{ key: 'k2', partition: 0, value: null }]);
    expect(rm.runByBusinessKey('order-7')).toBeUndefined();
  });
});
