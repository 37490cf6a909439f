import { newMetadata } from '@keyflow/contracts';
import { eventually } from '@keyflow/testing';
import { OrchestratorHarness, post } from './support';

jest.setTimeout(180_000);

const PARTITIONS = 4;

type Health = { status: string; partitions: number[]; failed: Array<{ component: string }> };
const health = async (url: string) => {
  const r = await fetch(`${url}/health`);
  return { code: r.status, body: (await r.json()) as Health };
};

describe('orchestrator health and the read model', () => {
  it('malformed records on wf.state (not a snapshot; a snapshot whose state is not JSON) are skipped: later snapshots are still read, take-overs still finish, /health stays 200', async () => {
    const h = new OrchestratorHarness('orch-malformed');
    try {
      const a = await h.startOrchestrator({ ORCHESTRATOR_PARTITIONS: String(PARTITIONS) });
      const ua = await a.ready;
      await h.codec.registerTopics(['wf.state']);
      const producer = h.ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      const notJson = (runId: string) =>
        h.codec.encode('wf.state', 'RunSnapshot', {
          metadata: newMetadata('RunSnapshot', { key: runId, correlationId: runId }),
          runId,
          sequence: 1,
          status: 'running',
          state: '{not json',
          stateRef: null,
          segment: null,
        });
      // Both kinds in every partition, before any valid snapshot that follows.
      await producer.send({
        topic: h.codec.physical('wf.state'),
        acks: -1,
        messages: Array.from({ length: PARTITIONS }, (_, p) => [
          { partition: p, key: `junk-${p}`, value: Buffer.from('these bytes are not a snapshot') },
          { partition: p, key: `bad-${p}`, value: notJson(`bad-${p}`) },
        ]).flat(),
      });
      await producer.disconnect();

      // Later snapshots, one per run, land in the same partitions: the read model must still read them.
      const runIds: string[] = [];
      for (let i = 0; i < 8; i++) {
        const r = await post(`${ua}/runs`, { workflow: 'three-step', input: { n: i } });
        expect(r.status).toBe(202);
        runIds.push(r.body.runId as string);
      }
      await eventually(
        'every run known to the read model after the malformed records',
        async () => Promise.all(runIds.map(async (id) => (await fetch(`${ua}/runs/${id}`)).status)),
        { until: (codes) => codes.every((c) => c === 200), timeoutMs: 30_000 },
      );
      const ha = await health(ua);
      expect(ha.code).toBe(200);
      expect(ha.body.status).toBe('ok');
      const metrics = await (await fetch(`${ua}/metrics`)).text();
      const skipped = [
        ...metrics.matchAll(/orchestrator_read_model_snapshots_skipped_total\{([^}]*)\} (\d+)/g),
      ];
      // 4 undecodable records and 4 snapshots whose state is not JSON, each counted under its reason
      expect(skipped.map((m) => [m[1].match(/reason="([^"]+)"/)?.[1], Number(m[2])]).sort()).toEqual([
        ['state not JSON', 4],
        ['undecodable', 4],
      ]);
      expect(ha.body).toMatchObject({ readModel: { snapshotsSkipped: 8 }, failed: [] });

      // A second instance reads the same topic from the start, takes partitions over (barriers), and answers.
      const b = await h.startOrchestrator({ ORCHESTRATOR_PARTITIONS: String(PARTITIONS) });
      const ub = await b.ready;
      await eventually(
        'the second instance owns partitions (its take-overs read their barriers past the malformed records)',
        async () => (await health(ub)).body.partitions.length,
        { until: (n) => n > 0, timeoutMs: 60_000 },
      );
      expect((await fetch(`${ub}/runs/${runIds[0]}`)).status).toBe(200);
      expect((await health(ub)).code).toBe(200);
      expect(a.proc.exitCode).toBeNull();
      expect(b.proc.exitCode).toBeNull();
    } finally {
      await h.teardown();
    }
  });

  it('an engine consumer that crashes for good (the broker refuses its session timeout) turns /health 503 naming it, and the process exits 1', async () => {
    const h = new OrchestratorHarness('orch-crash');
    try {
      // Above the broker's group.max.session.timeout.ms (30 min by default): JoinGroup answers INVALID_SESSION_TIMEOUT,
      // which kafkajs does not retry: its consumer crashes without restart.
      const p = await h.startOrchestrator({
        ORCHESTRATOR_PARTITIONS: String(PARTITIONS),
        ORCHESTRATOR_SESSION_TIMEOUT_MS: String(31 * 60_000),
        KEYFLOW_FATAL_EXIT_DELAY_MS: '15000',
      });
      const url = await p.ready;
      const r = await health(url);
      expect(r.code).toBe(503);
      expect(r.body.status).toBe('unhealthy');
      expect(r.body.failed.map((f) => f.component)).toEqual(['engine consumer']);
      await expect(p.exited).resolves.toBe(1);
      expect(p.logs.some((l) => l.includes('"engine consumer failed for good; exiting"'))).toBe(true);
    } finally {
      await h.teardown();
    }
  });
});
