import type { KafkaMessage } from '@keyflow/kafka';
import { rerunAdmission, type RerunFactsOf } from '../../src';

/**
 * The redrive check of a child run's StartRun in wf.requests.dlq (libs/ops rerunAdmission): it is judged as its parent
 * step's attempt, from the parent run's view alone.
 */
const PREFIX = 'p.';
const parent = { runId: 'order-1', stepId: 'book', attempt: 1, idempotencyKey: 'order-1/book' };

/** A codec that reads every record as `value` (a StartRun, or another wf.requests event). */
function codecReading(value: { event: string; value: object } | Error) {
  return {
    logical: (t: string) => (t.startsWith(PREFIX) ? (t.slice(PREFIX.length) as never) : undefined),
    useTopics: async () => undefined,
    decode: async () => {
      if (value instanceof Error) throw value;
      return value as never;
    },
  };
}

const record = { value: Buffer.from('x'), offset: '7', timestamp: String(Date.now()) } as KafkaMessage;
const at = { partition: 0, originalTopic: `${PREFIX}wf.requests` };

describe('the redrive check of a child run start (wf.requests.dlq)', () => {
  it("refuses a child's StartRun whose parent run ended, from the parent's view alone: no worker record is asked for, none counts", async () => {
    const asked: Array<{ runId: string; need?: { workerRecord: boolean } }> = [];
    const facts: RerunFactsOf = async (cmd, _age, need) => {
      asked.push({ runId: cmd.runId, need });
      // A worker record of the parent step's key would make a task command safe to republish: not a child's start.
      return { stored: true, completionTtlMs: 1, run: { runId: 'order-1', status: 'failed', steps: {} } };
    };
    const admit = rerunAdmission(
      codecReading({ event: 'StartRun', value: { runId: 'order-1~book~1', parent } }),
      facts,
    );
    const refusal = await admit(record, at);
    expect(refusal).toEqual({
      code: 'RUN_ENDED',
      reason: expect.stringMatching(
        /^child run order-1~book~1's StartRun is not awaited by its parent: run order-1 is failed/,
      ),
    });
    expect(asked).toEqual([{ runId: 'order-1', need: { workerRecord: false } }]);
  });

  it('lets through a child start its parent step awaits, a start without a parent, and other requests, without asking', async () => {
    const awaiting: RerunFactsOf = async () => ({
      run: {
        runId: 'order-1',
        status: 'running',
        steps: { book: { status: 'scheduled', attempt: 1 } as never },
      },
    });
    const child = { event: 'StartRun', value: { runId: 'order-1~book~1', parent } };
    expect(await rerunAdmission(codecReading(child), awaiting)(record, at)).toBeUndefined();
    const never: RerunFactsOf = async () => {
      throw new Error('not asked');
    };
    for (const other of [
      { event: 'StartRun', value: { runId: 'r', parent: null } },
      { event: 'SignalRun', value: { runId: 'r' } },
    ])
      expect(await rerunAdmission(codecReading(other), never)(record, at)).toBeUndefined();
  });

  it("refuses a child's StartRun whose parent run's status is not known (no API), saying so", async () => {
    const unknown: RerunFactsOf = async () => ({ stored: false });
    const child = { event: 'StartRun', value: { runId: 'order-1~book~1', parent } };
    expect(await rerunAdmission(codecReading(child), unknown)(record, at)).toEqual({
      code: 'RUN_STATUS_UNKNOWN',
      reason: expect.stringContaining('the status of its parent run order-1 is not known'),
    });
  });

  it('throws when the record cannot be read now (the registry away: retryable), and lets through one that never decodes', async () => {
    const never: RerunFactsOf = async () => {
      throw new Error('not asked');
    };
    const away = Object.assign(new Error('registry unavailable'), { retryable: true });
    await expect(rerunAdmission(codecReading(away), never)(record, at)).rejects.toThrow(
      'registry unavailable',
    );
    const junk = Object.assign(new Error('not Avro'), { retryable: false });
    expect(await rerunAdmission(codecReading(junk), never)(record, at)).toBeUndefined();
  });
});
