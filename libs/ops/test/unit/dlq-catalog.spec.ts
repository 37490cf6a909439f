import { catalogDlqSource, isCatalogDlq } from '../../src';

/**
 * DLQ tools act only on the DLQs keyflow declares (issue 39, fault 9): `wf.requests.dlq`, `task.results.dlq` and
 * `task.<type>.dlq` under the deployment's topic prefix, never any other `*.dlq` topic of a shared cluster.
 */
describe('the DLQ topics of a deployment', () => {
  it('are the DLQs of the topics keyflow declares, by logical name', () => {
    for (const t of [
      'wf.requests.dlq',
      'task.results.dlq',
      'task.charge.dlq',
      'task.etl.load.dlq',
      'task.a-b_C.dlq',
    ])
      expect([t, isCatalogDlq(t)]).toEqual([t, true]);
    for (const t of [
      'orders.dlq',
      'wf.events.dlq',
      'wf.state.dlq',
      'task.dlq',
      'task..dlq',
      'task.charge',
      'dlq.handled',
      'other.task.charge.dlq',
      'task.charge.dlq.dlq',
      'task.x y.dlq',
    ])
      expect([t, isCatalogDlq(t)]).toEqual([t, false]);
  });

  it("with a declared set (the engine's catalog), only those", () => {
    const declared = new Set(['task.charge.dlq', 'wf.requests.dlq']);
    expect(isCatalogDlq('task.charge.dlq', declared)).toBe(true);
    expect(isCatalogDlq('task.refund.dlq', declared)).toBe(false);
  });

  it("names a DLQ's one source topic (physical names)", () => {
    expect(catalogDlqSource('p.task.charge.dlq')).toBe('p.task.charge');
  });
});
