import { reduce, SIGNAL_BUFFER_FULL, workflow, type WorkflowInput } from '../../src';

let at = 1_000_000;
const input = (extra: Record<string, unknown>) =>
  ({ eventId: `e${at}`, at: (at += 10), runId: 'r1', ...extra }) as WorkflowInput;

describe('signals buffered for a run', () => {
  const def = workflow('approval', 1).wait('approve', { signal: 'approved', timerMs: 60_000 }).build();

  it('past the limit a signal is rejected with SIGNAL_BUFFER_FULL naming the limit, and the state does not grow', () => {
    let s = reduce(
      def,
      undefined,
      input({ kind: 'start', workflow: 'approval', version: 1, businessKey: 'b', input: {} }),
    ).state!;
    for (let i = 0; i < 3; i++) {
      const d = reduce(def, s, input({ kind: 'signal', signal: `other-${i}`, payload: i }), {
        signalBufferLimit: 3,
      });
      expect(d.ignored).toBeUndefined();
      s = d.state!;
    }
    expect(Object.keys(s.signals)).toEqual(['other-0', 'other-1', 'other-2']);
    const over = reduce(def, s, input({ kind: 'signal', signal: 'other-3', payload: 3 }), {
      signalBufferLimit: 3,
    });
    expect(over.ignored).toBe(
      `${SIGNAL_BUFFER_FULL}: run r1 already buffers 3 signals (limit 3); other-3 rejected`,
    );
    expect(over.state).toBe(s);
    expect(Object.keys(s.signals)).toHaveLength(3);
    // The signal the run waits for is never refused: it is delivered, not buffered.
    const done = reduce(def, s, input({ kind: 'signal', signal: 'approved', payload: 'ok' }), {
      signalBufferLimit: 3,
    });
    expect(done.ignored).toBeUndefined();
    expect(done.state!.status).toBe('completed');
  });
});
