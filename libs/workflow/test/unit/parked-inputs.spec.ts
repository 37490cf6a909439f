import {
  PendingRuns,
  reduce,
  TERMINAL,
  UNPARK_TIMER,
  workflow,
  type ParkedInput,
  type RunState,
  type WorkflowInput,
} from '../../src';

const def = workflow('approval', 1).wait('approve', { signal: 'approved', timerMs: 600_000 }).build();
const at = 1_000_000;
const parked = (kind: ParkedInput['kind'], offset: number): ParkedInput => ({
  kind,
  eventId: `e${offset}`,
  parkedAt: at + offset,
  record: { topic: 'wf.requests', partition: 0, offset: String(offset), value: 'AA==', headers: {} },
});
const start = (runId: string): WorkflowInput => ({
  kind: 'start',
  eventId: 's',
  at,
  runId,
  workflow: 'approval',
  version: 1,
  businessKey: runId,
  input: {},
});

describe('parked inputs', () => {
  it('are kept on the run in order, with an unpark timer due at once, in a copy: the committed state is untouched', () => {
    const committed = reduce(def, undefined, start('r1')).state!;
    const before = JSON.stringify(committed);
    const pending = new PendingRuns((id) => (id === 'r1' ? committed : undefined));
    expect(pending.park('r1', parked('signal', 1), at + 1)).toBe(1);
    expect(pending.park('r1', parked('cancel', 2), at + 2)).toBe(2);
    const s = pending.changed().get('r1')!;
    expect(s.parked!.map((p) => p.kind)).toEqual(['signal', 'cancel']);
    expect(s.timers[UNPARK_TIMER]).toEqual({ dueAt: at + 1, purpose: 'unpark' });
    expect(s.sequence).toBe(committed.sequence + 2);
    expect(s.status).toBe('waiting');
    expect(JSON.stringify(committed)).toBe(before);
  });

  it('a StartRun of an unknown workflow makes a `parked` run (not terminal) whose first real snapshot supersedes it', () => {
    const pending = new PendingRuns(() => undefined);
    pending.park('r2', parked('start', 1), at, { workflow: 'approval', version: 1, businessKey: 'b' });
    pending.park('r2', parked('signal', 2), at + 5);
    const s = pending.changed().get('r2')!;
    expect(s.status).toBe('parked');
    expect(TERMINAL.has(s.status)).toBe(false);
    expect([s.workflow, s.version, s.sequence]).toEqual(['approval', 1, 0]);
    expect(s.parked!.map((p) => p.kind)).toEqual(['start', 'signal']);

    // The next batch, on an engine that has the workflow: the parked inputs come out in order, the run is unknown
    // until its start is applied, then it is a real run with sequence 1 > 0.
    const next = new PendingRuns((id) => (id === 'r2' ? s : undefined));
    expect(next.unpark('r2').map((p) => p.eventId)).toEqual(['e1', 'e2']);
    expect(next.get('r2')).toBeUndefined();
    expect(next.removed()).toEqual(['r2']); // if its start is dead-lettered, the parked run is tombstoned
    next.apply(def, start('r2'));
    expect(next.removed()).toEqual([]);
    const started = next.changed().get('r2')!;
    expect([started.status, started.sequence, started.parked]).toEqual(['waiting', 1, undefined]);
    expect(started.timers[UNPARK_TIMER]).toBeUndefined();
    expect(s.parked).toHaveLength(2); // the committed state is untouched
  });

  it('a replay after a failed input keeps the parked and unparked changes (the batch goes on as before it)', () => {
    const committed: RunState = reduce(def, undefined, start('r3')).state!;
    const pending = new PendingRuns(() => committed);
    pending.park('r3', parked('signal', 1), at + 1);
    pending.undoLast('r3'); // undoes the park: nothing applied since
    expect(pending.get('r3')!.parked).toBeUndefined();
    pending.park('r3', parked('signal', 2), at + 2);
    // A definition whose output throws: the signal that completes the run fails, the copy is made again.
    const throwing = workflow('approval', 1)
      .wait('approve', { signal: 'approved', timerMs: 600_000 })
      .output(() => {
        throw new Error('boom');
      })
      .build();
    const signal: WorkflowInput = {
      kind: 'signal',
      eventId: 'sig',
      at: at + 3,
      runId: 'r3',
      signal: 'approved',
      payload: 1,
    };
    expect(() => pending.apply(throwing, signal)).toThrow('boom');
    expect(pending.get('r3')!.parked!.map((p) => p.eventId)).toEqual(['e2']);
    expect(pending.get('r3')!.status).toBe('waiting');
  });

  it('a parked StartRun cancelled where its workflow is unknown ends cancelled, never started, and supersedes the parked snapshots', () => {
    const pending = new PendingRuns(() => undefined);
    pending.park('r4', parked('start', 1), at, { workflow: 'nowhere', version: null, businessKey: 'b' });
    const s = pending.changed().get('r4')!;
    expect([s.workflow, s.version, s.timeline.map((e) => e.event)]).toEqual(['nowhere', 0, ['InputParked']]);
    const next = new PendingRuns(() => s);
    next.cancelParked('r4', 'typo', at + 10);
    const ended = next.changed().get('r4')!;
    expect([ended.status, ended.endedAt, ended.sequence, ended.parked, ended.timers]).toEqual([
      'cancelled',
      at + 10,
      1,
      undefined,
      {},
    ]);
    expect(TERMINAL.has(ended.status)).toBe(true);
  });
});
