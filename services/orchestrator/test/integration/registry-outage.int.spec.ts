import { EventCodec } from '@keyflow/contracts';
import { schemaSet, type TaskCompleted } from '@keyflow/schemas';
import { RegistryProxy, degradedWith, eventually, healthOf, metricValue } from '@keyflow/testing';
import { OrchestratorHarness, post } from './support';

jest.setTimeout(120_000);

/** The orchestrator's take-overs so far. */
const restores = (url: string) => metricValue(url, 'keyflow_orchestrator_partition_restores_total');

/**
 * The engine meets a result written with a schema id it has not cached while the registry is away: it must not
 * dead-letter it (the record is fine), nor crash or loop its consumer; the partition waits, named in /health, and
 * the run goes on once the registry answers.
 */
describe('the orchestrator while the schema registry is away', () => {
  const h = new OrchestratorHarness('orch-registry');
  const proxy = new RegistryProxy(new URL(h.ns.infra.schemaRegistryUrl));
  afterAll(async () => {
    await proxy.stop().catch(() => undefined);
    await h.teardown();
  });

  it('holds the partition with REGISTRY_UNAVAILABLE in /health, dead-letters nothing, keeps its producer (each held batch aborts its own transaction, no take-over), and completes the run when it is back', async () => {
    await proxy.start();
    const orch = await h.startOrchestrator({
      SCHEMA_REGISTRY_URL: proxy.url(),
      KEYFLOW_FATAL_EXIT_DELAY_MS: '1000',
    });
    const url = await orch.ready;
    await h.readEvents();
    // Results written by an older worker: TaskCompleted v1, a writer schema id the orchestrator has never seen.
    const older = new EventCodec({
      registryUrl: h.ns.infra.schemaRegistryUrl,
      topicPrefix: h.prefix,
      topicSchemas: { 'task.results': schemaSet().topicSchema('task.results', { TaskCompleted: 1 }) },
    });
    await older.registerTopics(['task.results']);
    const producer = h.ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      await h.simulateWorker(['echo'], (cmd) => ({ output: { echoed: cmd.stepId } }), {
        publish: async (topic, key, value) => {
          const d = await h.codec.decode('task.results', value, { topic, partition: 0, offset: '0' });
          const { replayed: _replayed, ...v1 } = d.value as TaskCompleted;
          const bytes = older.encode('task.results', 'TaskCompleted', v1 as TaskCompleted);
          await producer.send({ topic, acks: -1, messages: [{ key, value: bytes }] });
        },
      });
      const owned = (await (await h.ns.getAdmin()).fetchTopicOffsets(h.codec.physical('wf.requests'))).length;
      await eventually('every partition restored', () => restores(url), { until: (n) => n >= owned });
      const restoredBefore = await restores(url);
      await proxy.stop();
      const runId = `registry-away-${h.ns.prefix}`;
      expect((await post(`${url}/runs`, { workflow: 'three-step', input: {}, runId })).status).toBe(202);

      const health = await degradedWith(url, 'REGISTRY_UNAVAILABLE', 60_000);
      expect(health.status).toBe(200);
      expect(health.body.status).toBe('degraded');
      expect(h.of(runId).map((e) => e.event)).toEqual(['RunStarted', 'StepScheduled']); // first result held

      // While held: each try's transaction (its offsets sent before the apply threw) was aborted, so the engine's
      // group has committed nothing on task.results (the held result is the topic's first record), and the
      // partition's producer was kept (no take-over).
      const admin = await h.ns.getAdmin();
      const [committed] = await admin.fetchOffsets({
        groupId: h.ns.groupId('orchestrator'),
        topics: [h.codec.physical('task.results')],
      });
      expect(committed.partitions.filter((p) => Number(p.offset) > 0)).toEqual([]);
      expect(await restores(url)).toBe(restoredBefore);
      await proxy.start(proxy.port);
      await eventually('RunCompleted', () => h.of(runId).some((e) => e.event === 'RunCompleted'), {
        timeoutMs: 60_000,
      });
      await eventually('/health ok again', () => healthOf(url), { until: (x) => x.body.status === 'ok' });
      const dlq = await admin.fetchTopicOffsets(h.codec.physical('task.results.dlq'));
      expect(dlq.map((p) => p.high)).toEqual(dlq.map(() => '0'));
      expect(orch.proc.exitCode).toBeNull();
    } finally {
      await producer.disconnect();
    }
  });
});
