import { eventually } from '@keyflow/testing';
import { distinctEvents, OrchestratorHarness, post } from './support';

jest.setTimeout(180_000);

type Item = { status: number; runId?: string; code?: string; errors?: unknown[]; message?: string };

describe('POST /runs/batch', () => {
  it('answers each item as POST /runs would, starts each accepted run once, and a batch sent again with its keys starts nothing new', async () => {
    const h = new OrchestratorHarness('batch-start');
    try {
      const [orch] = await Promise.all([h.startOrchestrator(), h.startWorker()]);
      await h.readEvents();
      const url = await orch.ready;

      // A key bound by a single POST /runs first: the batch's item with it and another input is refused (422).
      const single = await post(
        `${url}/runs`,
        { workflow: 'three-step', input: { n: 'single' } },
        { 'Idempotency-Key': 'batch-key-taken' },
      );
      expect(single.status).toBe(202);

      const good = Array.from({ length: 20 }, (_, i) => ({
        workflow: 'three-step',
        input: { n: i },
        ...(i % 2 ? { idempotencyKey: `batch-${i}` } : {}),
      }));
      const items = [
        ...good.slice(0, 10),
        { workflow: 'no-such-workflow', input: {} },
        { workflow: 'three-step', input: 'not an object' },
        { workflow: 'three-step', input: { n: 'other' }, idempotencyKey: 'batch-key-taken' },
        ...good.slice(10),
      ];
      const first = await post(`${url}/runs/batch`, { runs: items });
      expect(first.status).toBe(200);
      const answers = first.body.runs as Item[];
      expect(answers).toHaveLength(items.length);
      // In the items' order: the 20 good ones accepted, the three bad ones answered as POST /runs answers them.
      const accepted = answers.filter((a) => a.status === 202);
      expect(accepted).toHaveLength(20);
      expect(answers[11]).toMatchObject({
        status: 400,
        errors: [expect.objectContaining({ path: 'input' })],
      });
      expect(answers[12]).toMatchObject({ status: 422, code: 'IDEMPOTENCY_KEY_REUSED' });
      const byItem = new Map(items.map((it, i) => [it, answers[i]]));
      for (const g of good) expect(byItem.get(g)).toMatchObject({ status: 202, workflow: 'three-step' });
      // The same as POST /runs for the same body: a refused item is refused alone.
      const alone = await post(`${url}/runs`, { workflow: 'no-such-workflow', input: {} });
      expect({ status: answers[10].status, message: answers[10].message }).toEqual({
        status: alone.status,
        message: alone.body.message,
      });

      const runIds = accepted.map((a) => a.runId!);
      expect(new Set(runIds).size).toBe(20);
      const ended = () =>
        new Set(
          distinctEvents(h.events)
            .filter((e) => e.event === 'RunCompleted')
            .map((e) => e.value.runId as string),
        );
      await eventually('every accepted run completed', () => runIds.filter((id) => ended().has(id)).length, {
        until: (n) => n === runIds.length,
        timeoutMs: 90_000,
      });

      // The client lost the answer and sends the keyed items again: their first answers, no run started again.
      const keyed = good.filter((g) => g.idempotencyKey);
      const again = await post(`${url}/runs/batch`, { runs: keyed });
      expect(again.status).toBe(200);
      expect(again.body.runs).toEqual(keyed.map((g) => byItem.get(g)));
      // Something written after the repeat (a fresh run) has been read: the repeat's StartRuns, had any been
      // written and applied, would be too.
      const marker = await post(`${url}/runs`, { workflow: 'three-step', input: { n: 'marker' } });
      await eventually('the marker run completed', () => ended().has(marker.body.runId as string), {
        until: Boolean,
        timeoutMs: 60_000,
      });
      const before = distinctEvents(h.events).filter((e) => e.event === 'RunStarted').length;
      const starts = distinctEvents(h.events).filter(
        (e) => e.event === 'RunStarted' && runIds.includes(e.value.runId as string),
      );
      expect(starts).toHaveLength(20);

      // Over the JSON body limit (100 KB): 413, nothing started (the marker above is the newest run).
      const big = Array.from({ length: 1000 }, (_, i) => ({
        workflow: 'three-step',
        input: { pad: 'x'.repeat(100), i },
      }));
      const tooBig = await post(`${url}/runs/batch`, { runs: big });
      expect(tooBig.status).toBe(413);

      // Not a list of 1-1000 items: a 400 naming `runs`, nothing started.
      for (const body of [{}, { runs: [] }, { runs: Array.from({ length: 1001 }, () => ({})) }]) {
        const r = await post(`${url}/runs/batch`, body);
        expect(r.status).toBe(400);
        expect(r.body.errors).toEqual([expect.objectContaining({ path: 'runs' })]);
      }
      // Nothing the refused batches carried was started: a run written after them is the next RunStarted read.
      const last = await post(`${url}/runs`, { workflow: 'three-step', input: { n: 'last' } });
      await eventually('the last run started', () => ended().has(last.body.runId as string), {
        until: Boolean,
        timeoutMs: 60_000,
      });
      expect(distinctEvents(h.events).filter((e) => e.event === 'RunStarted')).toHaveLength(before + 1);
    } finally {
      await h.teardown();
    }
  });
});
