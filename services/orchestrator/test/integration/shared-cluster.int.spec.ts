import { eventually } from '@keyflow/testing';
import { OrchestratorHarness, TERMINAL_EVENTS, distinctEvents, post } from './support';

jest.setTimeout(180_000);

/**
 * Two deployments on one cluster, told apart by KEYFLOW_TOPIC_PREFIX alone (docs/workers.md "Consumer groups": the way to share a cluster),
 * with the consumer group ids left at their defaults. Defaults the prefix does not reach put both orchestrators in
 * one consumer group (each member subscribed to its own prefix's topics) and give both the same transactional ids
 * (`<group>-p<n>`), so each fences the other's transactions.
 */
describe('deployments sharing a cluster', () => {
  it('two prefixes with default group ids keep their own consumer groups and both complete their runs', async () => {
    const deployments = [new OrchestratorHarness('shared-a'), new OrchestratorHarness('shared-b')];
    try {
      const urls: string[] = [];
      for (const h of deployments) {
        h.defaultGroupIds = true;
        urls.push(await (await h.startOrchestrator()).ready);
        await h.startWorker();
        await h.readEvents();
      }
      const runs = 20;
      const started = await Promise.all(
        deployments.map(async (_, d) => {
          const ids: string[] = [];
          for (let i = 0; i < runs; i++) {
            const r = await post(`${urls[d]}/runs`, { workflow: 'three-step', input: { n: i } });
            expect(r.status).toBe(202);
            ids.push(r.body.runId as string);
          }
          return ids;
        }),
      );
      for (const [d, h] of deployments.entries()) {
        const finished = () =>
          new Set(
            distinctEvents(h.events)
              .filter((e) => e.event === 'RunCompleted')
              .map((e) => e.value.runId),
          );
        await eventually(`deployment ${d}: every run completed`, () => finished().size, {
          until: (n) => n >= runs,
          timeoutMs: 90_000,
          intervalMs: 250,
        });
        expect([...finished()].sort()).toEqual([...started[d]].sort());
        expect(
          distinctEvents(h.events).filter((e) => TERMINAL_EVENTS.has(e.event) && e.event !== 'RunCompleted'),
        ).toEqual([]);
      }
      // Each deployment's services joined consumer groups named under its own prefix.
      const admin = await deployments[0].ns.getAdmin();
      const groups = (await admin.listGroups()).groups.map((g) => g.groupId);
      for (const h of deployments) {
        expect(groups).toEqual(
          expect.arrayContaining([`${h.prefix}keyflow.orchestrator`, `${h.prefix}keyflow.workers`]),
        );
      }
    } finally {
      for (const h of deployments) await h.teardown();
    }
  });

  it('a prefixed deployment upgraded from the unprefixed default group refuses to start until its offsets move, naming the fix', async () => {
    const h = new OrchestratorHarness('group-upgrade');
    h.defaultGroupIds = true;
    const legacy = 'keyflow.orchestrator';
    const admin = await h.ns.getAdmin();
    try {
      // As an earlier version left it: the prefix's wf.requests read up to offset 1 by the unprefixed default group.
      const requests = h.codec.physical('wf.requests');
      await h.ns.createTopics({ name: 'wf.requests', numPartitions: 4 });
      await admin.setOffsets({
        groupId: legacy,
        topic: requests,
        partitions: [{ partition: 0, offset: '1' }],
      });
      const refused = await h.startOrchestrator().then(
        () => 'started',
        (e: Error) => e.message,
      );
      expect(refused).toContain(`consumer group ${h.prefix}${legacy} (the default for KEYFLOW_TOPIC_PREFIX)`);
      expect(refused).toContain(`ORCHESTRATOR_GROUP_ID=${legacy}`);
      // The offsets copied to the new default group: it starts, from where the old group was.
      await admin.setOffsets({
        groupId: `${h.prefix}${legacy}`,
        topic: requests,
        partitions: [{ partition: 0, offset: '1' }],
      });
      await h.startOrchestrator();
    } finally {
      await admin.deleteGroups([legacy]).catch(() => undefined);
      await h.teardown();
    }
  });
});
