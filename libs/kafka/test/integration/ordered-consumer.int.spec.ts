import { Collector, TestNamespace, eventually } from '@keyflow/testing';
import { ComponentHealth, createLogger } from '@keyflow/observability';
import { OrderedConsumer, PartitionRevokedError, type ConsumedMessage } from '../../src';
import { gapsFrom, kafkaTimingFetches, kafkaWith } from './consumer-spy';

const logger = createLogger('test', { level: 'silent' });

describe('the ordered consumer', () => {
  const ns = new TestNamespace('ordered');
  const consumers: OrderedConsumer[] = [];
  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.stop(5_000)));
  });
  afterAll(() => ns.cleanup());

  async function produce(
    topic: string,
    messages: Array<{ key: string | null; value: string; partition?: number }>,
  ) {
    const p = ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await p.connect();
    await p.send({ topic, acks: -1, messages });
    await p.disconnect();
  }

  async function committed(groupId: string, topic: string): Promise<number> {
    const [t] = await (await ns.getAdmin()).fetchOffsets({ groupId, topics: [topic] });
    return t.partitions.reduce((s, p) => s + Math.max(0, Number(p.offset)), 0);
  }

  it('runs one key at a time in offset order while different keys run concurrently, and commits everything', async () => {
    const [topic] = await ns.createTopics({ name: 'order', numPartitions: 3 });
    const keys = 40;
    const perKey = 10;
    const sent = Array.from({ length: perKey }, (_, seq) =>
      Array.from({ length: keys }, (_, k) => ({ key: `k${k}`, value: String(seq) })),
    ).flat();
    await produce(topic, sent);

    const running = new Map<string, number>();
    let concurrent = 0;
    let maxConcurrent = 0;
    let maxSameKey = 0;
    const seen = new Collector<{ key: string; seq: number }>();
    const groupId = ns.groupId('order');
    const c = new OrderedConsumer({
      kafka: ns.kafka,
      groupId,
      topics: [topic],
      logger,
      commitIntervalMs: 50,
      handle: async (m: ConsumedMessage) => {
        const key = m.key!.toString();
        running.set(key, (running.get(key) ?? 0) + 1);
        maxSameKey = Math.max(maxSameKey, running.get(key)!);
        maxConcurrent = Math.max(maxConcurrent, ++concurrent);
        await new Promise((r) => setTimeout(r, Math.random() * 5));
        concurrent--;
        running.set(key, running.get(key)! - 1);
        seen.push({ key, seq: Number(m.value!.toString()) });
      },
    });
    consumers.push(c);
    await c.start();
    const all = await seen.wait(keys * perKey, 60_000);

    expect(maxSameKey).toBe(1);
    expect(maxConcurrent).toBeGreaterThan(1);
    for (let k = 0; k < keys; k++) {
      expect(all.filter((x) => x.key === `k${k}`).map((x) => x.seq)).toEqual(
        Array.from({ length: perKey }, (_, i) => i),
      );
    }
    await eventually('all offsets committed', () => committed(groupId, topic), {
      until: (n) => n === keys * perKey,
    });
  });

  it('a message given up because the consumer stops holds back the rest of its key: none of them runs, none is committed', async () => {
    const [topic] = await ns.createTopics({ name: 'drain-order', numPartitions: 1 });
    await produce(topic, [
      { key: 'k', value: 'first' },
      { key: 'k', value: 'second' },
      { key: 'other', value: 'free' },
    ]);
    const groupId = ns.groupId('drain-order');
    const ran: string[] = [];
    const firstStarted = new Collector<true>();
    let giveUp: (e: Error) => void = () => undefined;
    const c = new OrderedConsumer({
      kafka: ns.kafka,
      groupId,
      topics: [topic],
      logger,
      handle: async (m, hc) => {
        const v = m.value!.toString();
        if (v === 'first') {
          firstStarted.push(true);
          // Fails once the consumer drains, as a task whose handler had not started does.
          await new Promise<void>((_, reject) => {
            giveUp = reject;
            hc.draining.addEventListener('abort', () => reject(hc.draining.reason), { once: true });
          });
        }
        ran.push(v);
      },
    });
    await c.start();
    await firstStarted.wait(1, 30_000);
    await eventually('the other key to run', () => ran.includes('free'));
    await c.stop(5_000);
    giveUp(new Error('unused'));
    // The second record of key k never ran ahead of the first, and nothing of key k was committed.
    expect(ran).toEqual(['free']);
    expect(await committed(groupId, topic)).toBe(0);
  });

  it("fetches a partition's next record while its current batch runs, and starts it once that batch is done, in order", async () => {
    // The record a workflow's next step sends to the same partition must not wait for a fetch that left the
    // partition out because its previous batch was running (issue 12, latency).
    const [topic] = await ns.createTopics({ name: 'prefetch', numPartitions: 1 });
    await produce(topic, [{ key: 'a', value: '1' }]);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const handled = new Collector<string>();
    const groupId = ns.groupId('prefetch');
    const c = new OrderedConsumer({
      kafka: ns.kafka,
      groupId,
      topics: [topic],
      logger,
      fetchMaxWaitMs: 100,
      handle: async (m: ConsumedMessage) => {
        if (m.value!.toString() === '1') await gate;
        handled.push(m.value!.toString());
      },
    });
    consumers.push(c);
    await c.start();
    await eventually('the first batch runs', () => c.stats().inFlight, { until: (n) => n === 1 });
    await produce(topic, [
      { key: 'b', value: '2' },
      { key: 'a', value: '3' },
    ]);
    await eventually('the next batch is fetched while the first runs', () => c.stats().prefetched, {
      until: (n) => n === 1,
    });
    expect(handled.items).toEqual([]);
    release();
    const order = await handled.wait(3, 30_000);
    // 1 first (it held the partition); 3 after 1 (same key); 2 and 3 have different keys and may run in any order.
    expect(order[0]).toBe('1');
    expect([...order].sort()).toEqual(['1', '2', '3']);
    await eventually('all offsets committed', () => committed(groupId, topic), { until: (n) => n === 3 });
    expect(c.stats().prefetched).toBe(0);
  }, 60_000);

  it("a partition's next batch starts while the previous batch's offset commit is still unanswered; the asks meanwhile coalesce into one commit of the highest", async () => {
    // Kafka 4's group coordinator answers an OffsetCommit after its append linger (group.coordinator.append.linger.ms,
    // 5 ms by default): a workflow's next step, on the same partition, must not wait for it (issue 44, latency).
    // Here every OffsetCommit is held until the test lets them through.
    const [topic] = await ns.createTopics({ name: 'commit-behind', numPartitions: 1 });
    const requested: string[] = [];
    const held: Array<() => void> = [];
    let holding = true;
    const kafka = kafkaWith(ns.kafka, {
      onCommit: async (offsets) => {
        requested.push(...offsets.map((o) => o.offset));
        if (holding) await new Promise<void>((r) => held.push(r));
      },
    });
    const handled = new Collector<string>();
    const groupId = ns.groupId('commit-behind');
    const c = new OrderedConsumer({
      kafka,
      groupId,
      topics: [topic],
      logger,
      fetchMaxWaitMs: 100,
      handle: async (m: ConsumedMessage) => {
        handled.push(m.value!.toString());
      },
    });
    consumers.push(c);
    const letThrough = () => {
      holding = false;
      held.splice(0).forEach((r) => r());
    };
    try {
      await c.start();
      await produce(topic, [{ key: 'run', value: 'step 1' }]);
      await handled.wait(1, 30_000);
      await eventually('the first batch asks to commit', () => held.length, { until: (n) => n === 1 });
      // Steps 2 to 5 (same key, same partition), each its own batch, run while step 1's commit is unanswered.
      for (let step = 2; step <= 5; step++) {
        await produce(topic, [{ key: 'run', value: `step ${step}` }]);
        await handled.wait(step, 30_000);
      }
      expect(handled.items).toEqual(['step 1', 'step 2', 'step 3', 'step 4', 'step 5']);
      expect(held.length).toBe(1);
    } finally {
      letThrough();
    }
    await eventually('all five offsets committed', () => committed(groupId, topic), {
      until: (n) => n === 5,
    });
    // One commit at a time per partition: the four batches that ended meanwhile asked for 2, 3, 4 and 5; one commit
    // of 5 answered them all, so a partition finishing batches faster than the coordinator answers queues nothing.
    expect(requested).toEqual(['1', '5']);
  }, 60_000);

  /** `ns.kafka` whose consumers record the offsets of each OffsetCommit they send, in `requested`. */
  function recordingCommits(requested: string[]): typeof ns.kafka {
    return kafkaWith(ns.kafka, {
      onCommit: (offsets) => void requested.push(...offsets.map((o) => o.offset)),
    });
  }

  /**
   * A one-partition consumer with `commitIntervalMs`, whose commits are recorded, that has handled `steps` records of
   * one key, each produced after the previous one was handled (a batch each).
   */
  async function handledOneByOne(name: string, commitIntervalMs: number, steps: number) {
    const [topic] = await ns.createTopics({ name, numPartitions: 1 });
    const requested: string[] = [];
    const handled = new Collector<string>();
    const groupId = ns.groupId(name);
    const c = new OrderedConsumer({
      kafka: recordingCommits(requested),
      groupId,
      topics: [topic],
      logger,
      fetchMaxWaitMs: 100,
      commitIntervalMs,
      handle: async (m: ConsumedMessage) => {
        handled.push(m.value!.toString());
      },
    });
    await c.start();
    for (let step = 1; step <= steps; step++) {
      await produce(topic, [{ key: 'run', value: `step ${step}` }]);
      await handled.wait(step, 30_000);
    }
    return { c, topic, groupId, requested };
  }

  it("a partition's back-to-back batches make at most one OffsetCommit per commitIntervalMs: the asks within it coalesce into one trailing commit of the highest, sent with no further batch", async () => {
    // At 20 runs/s every task was a batch of its own and a commit of its own: 60 OffsetCommits a second from one
    // worker, each an append to __consumer_offsets, on the broker every step waits for (issue 44).
    // 10 s: the four later steps are produced and handled well within it, even on a loaded machine (each produce
    // connects a producer of its own), so no commit of theirs falls due before the trailing one.
    const { c, topic, groupId, requested } = await handledOneByOne('commit-linger', 10_000, 5);
    consumers.push(c);
    await eventually('all five offsets committed', () => committed(groupId, topic), {
      until: (n) => n === 5,
      timeoutMs: 30_000,
    });
    expect(requested).toEqual(['1', '5']);
  }, 60_000);

  it('stop() sends a commit still waiting out commitIntervalMs at once, before leaving the group', async () => {
    const { c, topic, groupId, requested } = await handledOneByOne('commit-linger-stop', 600_000, 2);
    await eventually('the first batch commits', () => committed(groupId, topic), { until: (n) => n === 1 });
    await c.stop(10_000);
    expect(requested).toEqual(['1', '2']);
    expect(await committed(groupId, topic)).toBe(2);
  }, 60_000);

  it('an idle consumer (no partition paused) long-polls: its fetches wait idleFetchMaxWaitMs, not fetchMaxWaitMs, and a record produced meanwhile is still handled', async () => {
    // An idle worker fetched every WORKER_FETCH_MAX_WAIT_MS (10 ms): 100 fetch requests a second per worker process
    // on the broker, with nothing to do. The short wait only matters while a partition is paused (left out of the
    // fetch in flight); with none paused a fetch is answered as soon as a record arrives.
    const [topic] = await ns.createTopics({ name: 'idle-fetch', numPartitions: 2 });
    const fetches: number[] = [];
    const kafka = kafkaTimingFetches(ns.kafka, fetches);
    const handled = new Collector<string>();
    const c = new OrderedConsumer({
      kafka,
      groupId: ns.groupId('idle-fetch'),
      topics: [topic],
      logger,
      fetchMaxWaitMs: 10,
      idleFetchMaxWaitMs: 1_000,
      handle: async (m: ConsumedMessage) => {
        handled.push(m.value!.toString());
      },
    });
    consumers.push(c);
    await c.start();
    await produce(topic, [{ key: 'a', value: 'first' }]);
    await handled.wait(1, 30_000);
    const from = fetches.length;
    await eventually('three more fetches while idle', () => fetches.length, { until: (n) => n >= from + 3 });
    const gaps = gapsFrom(fetches, from);
    // With fetchMaxWaitMs (10 ms) the gaps would be about 10 ms; an idle fetch waits at the broker up to 1,000 ms.
    expect(Math.min(...gaps)).toBeGreaterThanOrEqual(500);
    await produce(topic, [{ key: 'b', value: 'second' }]);
    await handled.wait(2, 30_000);
    expect(handled.items).toEqual(['first', 'second']);
  }, 60_000);

  it('stop(deadline) returns while an offset commit is never answered; the commit is left, not awaited past the deadline', async () => {
    // A deploy stops the worker while its group coordinator is slow or gone: the drain deadline bounds the stop, the
    // unanswered commit only means redelivery of completed work (which the idempotency layer absorbs).
    const [topic] = await ns.createTopics({ name: 'commit-never', numPartitions: 1 });
    const held: Array<() => void> = [];
    const kafka = kafkaWith(ns.kafka, { onCommit: () => new Promise<void>((r) => held.push(r)) });
    const handled = new Collector<string>();
    const c = new OrderedConsumer({
      kafka,
      groupId: ns.groupId('commit-never'),
      topics: [topic],
      logger,
      fetchMaxWaitMs: 100,
      handle: async (m: ConsumedMessage) => {
        handled.push(m.value!.toString());
      },
    });
    try {
      await c.start();
      await produce(topic, [{ key: 'run', value: 'step 1' }]);
      await handled.wait(1, 30_000);
      await eventually('the batch asks to commit', () => held.length, { until: (n) => n === 1 });
      let stopped = false;
      const stop = c.stop(500).then(() => (stopped = true));
      // Well past the 500 ms deadline (and kafkajs's own leave-group time), with the commit still unanswered.
      await eventually('stop() returns', () => stopped, { until: (s) => s, timeoutMs: 15_000 });
      await stop;
      expect(held.length).toBe(1);
    } finally {
      held.splice(0).forEach((r) => r());
    }
  }, 60_000);

  it('a batch that finishes while kafkajs restarts its crashed consumer (a broker gone) throws nothing out of the process', async () => {
    // kafkajs's crash handler calls disconnect() -> stop(), which drops its consumer group until the restart 5 s
    // later; pause/resume then throw. Stopping the kafkajs consumer under a running handler is that same state.
    const [topic] = await ns.createTopics({ name: 'restart', numPartitions: 1 });
    await produce(topic, [{ key: 'k', value: '1' }]);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const entered = new Collector<string>();
    const handled = new Collector<string>();
    const c = new OrderedConsumer({
      kafka: ns.kafka,
      groupId: ns.groupId('restart'),
      topics: [topic],
      logger,
      handle: async (m: ConsumedMessage) => {
        entered.push(m.value!.toString());
        await gate;
        handled.push(m.value!.toString());
      },
    });
    consumers.push(c);
    const escaped: unknown[] = [];
    const onEscape = (e: unknown) => escaped.push(e);
    process.on('unhandledRejection', onEscape);
    process.on('uncaughtException', onEscape);
    try {
      await c.start();
      await entered.wait(1, 30_000);
      await (c as unknown as { consumer: { stop(): Promise<void> } }).consumer.stop();
      release();
      await handled.wait(1, 10_000);
      await new Promise((r) => setImmediate(r)); // let the batch's finally run
      await new Promise((r) => setTimeout(r, 200));
      expect(escaped.map(String)).toEqual([]);
    } finally {
      process.off('unhandledRejection', onEscape);
      process.off('uncaughtException', onEscape);
    }
  }, 60_000);

  it('never commits past a message that is still running, even when later ones are done', async () => {
    const [topic] = await ns.createTopics({ name: 'prefix', numPartitions: 1 });
    await produce(topic, [
      { key: 'slow', value: 'a' },
      ...Array.from({ length: 5 }, (_, i) => ({ key: `fast${i}`, value: 'b' })),
    ]);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const groupId = ns.groupId('prefix');
    const c = new OrderedConsumer({
      kafka: ns.kafka,
      groupId,
      topics: [topic],
      logger,
      commitIntervalMs: 0,
      handle: async (m) => {
        if (m.key!.toString() === 'slow') await gate;
      },
    });
    consumers.push(c);
    await c.start();
    await eventually('only the slow message in flight', () => c.stats().inFlight, {
      until: (n) => n === 1 && c.stats().assigned === 1,
      timeoutMs: 30_000,
    });
    expect(await committed(groupId, topic)).toBe(0);
    release();
    await eventually('all committed after the slow one finishes', () => committed(groupId, topic), {
      until: (n) => n === 6,
    });
  });

  it('a partition stuck on a message never stalls the other partitions', async () => {
    const [topic] = await ns.createTopics({ name: 'stuck', numPartitions: 3 });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const done = new Collector<number>();
    const c = new OrderedConsumer({
      kafka: ns.kafka,
      groupId: ns.groupId('stuck'),
      topics: [topic],
      logger,
      handle: async (m) => {
        if (m.partition === 0) await gate;
        done.push(m.partition);
      },
    });
    consumers.push(c);
    await c.start();
    const p = ns.kafka.producer();
    await p.connect();
    await p.send({ topic, messages: [{ partition: 0, key: 'stuck', value: 'x' }] });
    // Later messages on the other partitions, in several rounds, each completes while partition 0 is stuck.
    for (let round = 1; round <= 3; round++) {
      await p.send({
        topic,
        messages: [1, 2].map((partition) => ({ partition, key: `k${round}`, value: String(round) })),
      });
      const seen = await done.wait(round * 2, 15_000);
      expect(seen.every((x) => x !== 0)).toBe(true);
    }
    await p.disconnect();
    release();
    await done.wait(7);
  });

  it('retries a message whose handler rejects, holding its key, and never skips it', async () => {
    const [topic] = await ns.createTopics({ name: 'retry', numPartitions: 1 });
    await produce(topic, [
      { key: 'a', value: '1' },
      { key: 'a', value: '2' },
      { key: 'b', value: '1' },
    ]);
    const calls: string[] = [];
    let failuresLeft = 2;
    const done = new Collector<string>();
    const c = new OrderedConsumer({
      kafka: ns.kafka,
      groupId: ns.groupId('retry'),
      topics: [topic],
      logger,
      infraRetry: {
        maxAttempts: 1000,
        initialDelayMs: 10,
        maxDelayMs: 20,
        multiplier: 2,
        nonRetryableErrors: [],
      },
      handle: async (m) => {
        const id = `${m.key}${m.value}`;
        calls.push(id);
        if (id === 'a1' && failuresLeft-- > 0) throw new Error('redis down');
        done.push(id);
      },
    });
    consumers.push(c);
    await c.start();
    const finished = await done.wait(3);
    expect(calls.filter((x) => x === 'a1')).toHaveLength(3);
    expect(finished.indexOf('a1')).toBeLessThan(finished.indexOf('a2'));
    expect(calls.indexOf('a2')).toBeGreaterThan(calls.lastIndexOf('a1'));
  });

  it('a message retried past the bound is named in /health as degraded with its error code until it is handled', async () => {
    const [topic] = await ns.createTopics({ name: 'retry-health', numPartitions: 1 });
    await produce(topic, [{ key: 'a', value: '1' }]);
    const health = new ComponentHealth();
    let registryUp = false;
    const done = new Collector<string>();
    const c = new OrderedConsumer({
      kafka: ns.kafka,
      groupId: ns.groupId('retry-health'),
      topics: [topic],
      logger,
      health,
      component: 'tasks',
      retryingDegradedAfterMs: 200,
      infraRetry: {
        maxAttempts: 1000,
        initialDelayMs: 20,
        maxDelayMs: 50,
        multiplier: 2,
        nonRetryableErrors: [],
      },
      handle: async (m) => {
        if (!registryUp)
          throw Object.assign(new Error('schema registry unavailable'), { code: 'REGISTRY_UNAVAILABLE' });
        done.push(`${m.key}${m.value}`);
      },
    });
    consumers.push(c);
    await c.start();
    const degraded = await eventually('degraded', () => health.degraded(), { until: (d) => d.length > 0 });
    expect(degraded).toEqual([
      expect.objectContaining({
        id: `tasks:${topic}:0:retrying`,
        code: 'REGISTRY_UNAVAILABLE',
        error: expect.stringContaining(`${topic}:0 offset 0 has been retried`),
      }),
    ]);
    expect(health.healthy).toBe(true);
    registryUp = true;
    expect(await done.wait(1)).toEqual(['a1']);
    await eventually('recovered', () => health.degraded(), { until: (d) => d.length === 0 });
  });

  it('a handler three times longer than the session timeout runs once, with no rebalance', async () => {
    const [topic] = await ns.createTopics({ name: 'long', numPartitions: 1 });
    await produce(topic, [{ key: 'k', value: 'long' }]);
    const sessionTimeoutMs = 6_000; // the broker's group.min.session.timeout.ms
    let runs = 0;
    const done = new Collector<number>();
    const groupId = ns.groupId('long');
    const c = new OrderedConsumer({
      kafka: ns.kafka,
      groupId,
      topics: [topic],
      logger,
      sessionTimeoutMs,
      heartbeatIntervalMs: 1_000,
      handle: async () => {
        runs++;
        await new Promise((r) => setTimeout(r, 3 * sessionTimeoutMs));
        done.push(runs);
      },
    });
    consumers.push(c);
    await c.start();
    await done.wait(1, 40_000);
    await eventually('committed', () => committed(groupId, topic), { until: (n) => n === 1 });
    expect(runs).toBe(1);
    expect(c.stats().joins).toBe(1); // no rejoin during the long handler
    const [member] = (await (await ns.getAdmin()).describeGroups([groupId])).groups;
    expect(member.state).toBe('Stable');
  }, 60_000);
  it('a partition revoked in a rebalance aborts the signal of the handlers running on it, and only those', async () => {
    const [topic] = await ns.createTopics({ name: 'revoke', numPartitions: 2 });
    const groupId = ns.groupId('revoke');
    const started = new Collector<number>();
    const aborted = new Collector<{ partition: number; reason: unknown }>();
    const release = new AbortController();
    const first = new OrderedConsumer({
      kafka: ns.kafka,
      groupId,
      topics: [topic],
      logger,
      sessionTimeoutMs: 10_000,
      heartbeatIntervalMs: 500,
      // Each handler waits until the test ends or its own signal aborts (a rebalance taking its partition).
      handle: (m, ctx) =>
        new Promise<void>((resolve) => {
          started.push(m.partition);
          const onAbort = () => {
            aborted.push({ partition: m.partition, reason: ctx.signal.reason });
            resolve();
          };
          if (ctx.signal.aborted) return onAbort();
          ctx.signal.addEventListener('abort', onAbort, { once: true });
          release.signal.addEventListener('abort', () => resolve(), { once: true });
        }),
    });
    consumers.push(first);
    await first.start();
    await produce(topic, [
      { key: 'a', value: 'x', partition: 0 },
      { key: 'b', value: 'y', partition: 1 },
    ]);
    await started.wait(2, 30_000);
    expect(aborted.items).toEqual([]);
    // A second member joins: one of the two partitions moves to it.
    const second = new OrderedConsumer({
      kafka: ns.kafka,
      groupId,
      topics: [topic],
      logger,
      handle: async () => {},
    });
    consumers.push(second);
    await second.start();
    const [gone] = await aborted.wait(1, 30_000);
    expect(gone.reason).toBeInstanceOf(PartitionRevokedError);
    expect((gone.reason as PartitionRevokedError).code).toBe('PARTITION_REVOKED');
    release.abort();
    expect(aborted.items).toHaveLength(1); // the partition this member kept was not aborted
  });
});
