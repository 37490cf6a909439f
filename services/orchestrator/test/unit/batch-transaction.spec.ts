import { KafkaJSError } from '@keyflow/kafka';
import { trace } from '@opentelemetry/api';
import { abandonBatch, openBatch, stillFresh, type CommitDeps } from '../../src/engine/commit';
import { ENGINE_TRANSACTION_TIMEOUT_MS, type OwnedPartition } from '../../src/engine/ownership';

/**
 * The engine's batch transaction (commit.ts): opened before the apply with its offsets sent at once, given up by an
 * abort only once the offsets settled, and opened again when the apply outlasted half the transaction timeout. A
 * scripted producer records the calls in order; the offsets' request is held until the test answers it.
 */
function scripted(opts: { abortFails?: boolean } = {}) {
  const log: string[] = [];
  let opened = 0;
  const answers: Array<() => void> = [];
  const producer = {
    transaction: async () => {
      const id = ++opened;
      log.push(`open ${id}`);
      return {
        sendOffsets: (o: { topics: Array<{ partitions: Array<{ offset: string }> }> }) => {
          log.push(`offsets ${id} sent (${o.topics[0].partitions[0].offset})`);
          return new Promise<void>((resolve) =>
            answers.push(() => {
              log.push(`offsets ${id} answered`);
              resolve();
            }),
          );
        },
        abort: async () => {
          log.push(`abort ${id}`);
          if (opts.abortFails) throw new Error('the producer is fenced');
        },
      };
    },
  };
  const retakes: unknown[] = [];
  const o = { producer, partition: 0 } as unknown as OwnedPartition;
  const quiet = { info() {}, warn() {}, error() {}, debug() {} };
  const d = {
    cfg: { ORCHESTRATOR_GROUP_ID: 'engine' },
    logger: quiet,
    retakeOver: (_o: OwnedPartition, err: unknown) => void retakes.push(err),
  } as unknown as CommitDeps;
  const answer = () => answers.shift()!();
  return { o, d, log, retakes, answer };
}

const batch = { topic: 'task.results', partition: 0 };
const parent = trace.wrapSpanContext({ traceId: '0'.repeat(32), spanId: '0'.repeat(16), traceFlags: 0 });
const turns = async (n = 5) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

describe("the engine's batch transaction", () => {
  it('sends the offsets past the batch when it opens, before anything of the apply', async () => {
    const s = scripted();
    const open = await openBatch(s.o, s.d, batch, '41', parent);
    expect(s.log).toEqual(['open 1', 'offsets 1 sent (42)']);
    s.answer();
    await open.offsets;
  });

  it('an apply that throws gives the transaction up by an abort sent only after its offsets were answered', async () => {
    const s = scripted();
    const open = await openBatch(s.o, s.d, batch, '41', parent);
    const given = abandonBatch(s.o, s.d, open, new Error('registry away'));
    await turns();
    expect(s.log).toEqual(['open 1', 'offsets 1 sent (42)']); // no abort while the TxnOffsetCommit is in flight
    s.answer();
    await given;
    expect(s.log).toEqual(['open 1', 'offsets 1 sent (42)', 'offsets 1 answered', 'abort 1']);
    expect(s.retakes).toEqual([]);
  });

  it('an abort that fails takes the partition over again and throws a retriable error, so the batch is not applied again on that producer', async () => {
    const s = scripted({ abortFails: true });
    const open = await openBatch(s.o, s.d, batch, '41', parent);
    s.answer();
    const given = abandonBatch(s.o, s.d, open, new Error('snapshot too large'));
    await expect(given).rejects.toBeInstanceOf(KafkaJSError);
    await expect(given).rejects.toMatchObject({ retriable: true });
    expect(s.retakes).toHaveLength(1);
  });

  describe('an apply that runs past half the transaction timeout', () => {
    beforeEach(() =>
      jest.useFakeTimers({ doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask', 'performance'] }),
    );
    afterEach(() => jest.useRealTimers());

    it('has its transaction aborted then, while it still runs (offsets settled first), and the commit gets a new one with the offsets sent again', async () => {
      const s = scripted();
      const open = await openBatch(s.o, s.d, batch, '41', parent);
      jest.advanceTimersByTime(ENGINE_TRANSACTION_TIMEOUT_MS / 2);
      await turns();
      expect(s.log).toEqual(['open 1', 'offsets 1 sent (42)']); // not under a TxnOffsetCommit in flight
      s.answer();
      await turns();
      expect(s.log.at(-1)).toBe('abort 1'); // before the apply ended: the coordinator never times it out
      const fresh = await stillFresh(s.o, s.d, open, batch, '41', parent);
      expect(fresh).not.toBe(open);
      expect(s.log).toEqual([
        'open 1',
        'offsets 1 sent (42)',
        'offsets 1 answered',
        'abort 1',
        'open 2',
        'offsets 2 sent (42)',
      ]);
      s.answer();
      await fresh.offsets;
      jest.advanceTimersByTime(ENGINE_TRANSACTION_TIMEOUT_MS); // the new one's timer is stopped: not aborted under its commit
      await turns();
      expect(s.log.filter((l) => l.startsWith('abort'))).toEqual(['abort 1']);
    });

    it('a transaction whose apply ended in time keeps it, and its timer never aborts it under the commit', async () => {
      const s = scripted();
      const open = await openBatch(s.o, s.d, batch, '41', parent);
      s.answer();
      expect(await stillFresh(s.o, s.d, open, batch, '41', parent)).toBe(open);
      jest.advanceTimersByTime(ENGINE_TRANSACTION_TIMEOUT_MS);
      await turns();
      expect(s.log).toEqual(['open 1', 'offsets 1 sent (42)', 'offsets 1 answered']);
    });

    it('an apply that throws after the timer gave the transaction up aborts it once', async () => {
      const s = scripted();
      const open = await openBatch(s.o, s.d, batch, '41', parent);
      s.answer();
      jest.advanceTimersByTime(ENGINE_TRANSACTION_TIMEOUT_MS / 2);
      await abandonBatch(s.o, s.d, open, new Error('blob store away'));
      expect(s.log.filter((l) => l.startsWith('abort'))).toEqual(['abort 1']);
      expect(s.retakes).toEqual([]);
    });
  });
});
