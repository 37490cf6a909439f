import { AssignerProtocol, type Producer } from '@keyflow/kafka';
import { AwaitTimeoutError, eventually } from '../await';
import type { Lifecycle, OrchestratorHarness } from '../harness/orchestrator';

/**
 * The chaos suite's topic trigger (issue 42): a source topic the scenario creates itself, as a team would (keyflow
 * did not create it), whose records start `chaos-order` runs through the start trigger `chaos-orders` that the test
 * orchestrator (services/orchestrator/test/fixtures/test-orchestrator.ts) declares when TRIGGER_SOURCE_TOPIC is set.
 * A record's value is JSON `{ order, n, decline, amount }`, keyed by its order id (a few order ids: several records
 * per key); its run id is the trigger's default, `chaos-orders:<topic>:<partition>:<offset>`.
 */
export const CHAOS_TRIGGER = 'chaos-orders';
/** Order ids (record keys) the trigger load uses: `order-0` .. `order-5`. */
export const CHAOS_ORDER_KEYS = 6;

/** What the trigger started, read from wf.events after the faults (ChaosReport.triggerStarts). */
export interface TriggerStarts {
  /** Records in the source topic (its high watermarks: written by a non-transactional producer, no gaps). */
  records: number;
  /** Of those, records whose run has a RunStarted in wf.events. */
  started: number;
  /** `runId (key <order>)`: records whose run never started. */
  lost: string[];
  /**
   * `runId: N RunStarted` (distinct event ids) for a run started more than once, and
   * `record <partition>:<offset>: runs a, b` for a record that started two runs (its input names its record).
   */
  doubled: string[];
  /** `<fault>: what`: after a trigger fault, records produced around it did not start within the deadline. */
  notResumed: string[];
}

/** The `source` (`<partition>:<offset>`) a trigger run's input names, or why it cannot be read. */
function recordOf(input: unknown): string {
  try {
    return String((JSON.parse(String(input)) as { source?: string }).source);
  } catch {
    return `unreadable input ${String(input).slice(0, 40)}`;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The source topic, its producer, and the trigger group's admin operations. */
export class ChaosTrigger {
  /** The source topic (its broker name: the namespace prefix keeps test runs apart; teardown deletes it). */
  readonly topic: string;
  /** The trigger's consumer group: `<prefix>keyflow-trigger-chaos-orders`. */
  readonly group: string;
  /** Run id -> key of each record the producer wrote, from its send results. */
  readonly sent = new Map<string, string>();
  readonly notResumed: string[] = [];
  private producer?: Producer;

  constructor(
    private readonly h: OrchestratorHarness,
    private readonly partitions: number,
  ) {
    this.topic = `${h.prefix}src-${CHAOS_TRIGGER}`;
    this.group = `${h.prefix}keyflow-trigger-${CHAOS_TRIGGER}`;
  }

  /** The run id the trigger derives from a record (the default of startTrigger's `runId`). */
  runId(partition: number, offset: string | number): string {
    return `${CHAOS_TRIGGER}:${this.topic}:${partition}:${offset}`;
  }

  /** Creates the source topic (broker default replication) and connects an idempotent producer. */
  async setup(): Promise<void> {
    const admin = await this.h.ns.getAdmin();
    await admin.createTopics({
      topics: [{ topic: this.topic, numPartitions: this.partitions }],
      waitForLeaders: true,
    });
    this.producer = this.h.ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await this.producer.connect();
  }

  async close(): Promise<void> {
    await this.producer?.disconnect();
  }

  /**
   * Writes one order record (retrying for up to 90 s: a broker may be restarting) and returns the run id it must
   * start. @throws the producer's last error after 90 s
   */
  async produce(n: number, key: string, decline: boolean): Promise<string> {
    const value = JSON.stringify({ order: key, n, decline, amount: 1 + n });
    const deadline = Date.now() + 90_000;
    for (;;) {
      try {
        const [m] = await this.producer!.send({ topic: this.topic, acks: -1, messages: [{ key, value }] });
        const id = this.runId(m.partition, m.baseOffset ?? '?');
        this.sent.set(id, key);
        return id;
      } catch (e) {
        if (Date.now() > deadline) throw e;
        await sleep(500);
      }
    }
  }

  /** Orchestrator instance id -> the source partitions it reads as a member of the trigger group (clientId). */
  async hosts(): Promise<Map<string, number[]>> {
    const admin = await this.h.ns.getAdmin();
    const { groups } = await admin.describeGroups([this.group]);
    const out = new Map<string, number[]>();
    for (const m of groups[0]?.members ?? []) {
      const a = AssignerProtocol.MemberAssignment.decode(m.memberAssignment);
      out.set(m.clientId.replace(/^keyflow-orchestrator-/, ''), a?.assignment[this.topic] ?? []);
    }
    return out;
  }

  /**
   * Waits for the trigger group to have no member, then resets its source offsets to the earliest.
   * @throws AwaitTimeoutError when the group keeps a member for `timeoutMs`; kafkajs errors of the reset
   */
  async resetToEarliest(timeoutMs: number): Promise<string> {
    const admin = await this.h.ns.getAdmin();
    const state = await eventually(
      `the trigger group ${this.group} empty`,
      async () => (await admin.describeGroups([this.group])).groups[0]?.state,
      { until: (s) => s === 'Empty' || s === 'Dead', timeoutMs, intervalMs: 250 },
    );
    await admin.resetOffsets({ groupId: this.group, topic: this.topic, earliest: true });
    return state ?? 'unknown';
  }

  /**
   * Waits until each of `runIds` has a RunStarted in `events` (the live wf.events reader); returns the seconds it
   * took, or records `<fault>: ...` in notResumed and returns undefined.
   */
  async awaitStarted(
    fault: string,
    runIds: string[],
    events: { items: Lifecycle[] },
  ): Promise<number | undefined> {
    const t = Date.now();
    const missing = () => {
      const started = new Set(events.items.filter((e) => e.event === 'RunStarted').map((e) => e.value.runId));
      return runIds.filter((id) => !started.has(id));
    };
    try {
      await eventually(`${fault}: the trigger to start its records' runs`, missing, {
        until: (m) => m.length === 0,
        timeoutMs: 120_000,
        intervalMs: 250,
      });
      return (Date.now() - t) / 1000;
    } catch (e) {
      if (!(e instanceof AwaitTimeoutError)) throw e;
      this.notResumed.push(
        `${fault}: ${missing().length} of ${runIds.length} not started in 120 s: ${missing().join(', ')}`,
      );
      return undefined;
    }
  }

  /** What the trigger started, from every wf.events record read (`events`: both readers, repeats included). */
  async report(events: Lifecycle[]): Promise<TriggerStarts> {
    const admin = await this.h.ns.getAdmin();
    const records: string[] = [];
    for (const p of await admin.fetchTopicOffsets(this.topic))
      for (let o = Number(p.low); o < Number(p.high); o++) records.push(this.runId(p.partition, o));
    const startedBy = new Map<string, Set<string>>(); // run id -> RunStarted event ids
    const bySource = new Map<string, Set<string>>(); // "<partition>:<offset>" -> run ids
    for (const e of events) {
      if (e.event !== 'RunStarted' || !e.value.runId.startsWith(`${CHAOS_TRIGGER}:`)) continue;
      const ids = startedBy.get(e.value.runId) ?? new Set<string>();
      ids.add(e.value.metadata.eventId);
      startedBy.set(e.value.runId, ids);
      const source = recordOf(e.value.input);
      const runs = bySource.get(source) ?? new Set<string>();
      runs.add(e.value.runId);
      bySource.set(source, runs);
    }
    const doubled = [
      ...[...startedBy].filter(([, ids]) => ids.size > 1).map(([id, ids]) => `${id}: ${ids.size} RunStarted`),
      ...[...bySource]
        .filter(([, runs]) => runs.size > 1)
        .map(([source, runs]) => `record ${source}: runs ${[...runs].join(', ')}`),
    ];
    return {
      records: records.length,
      started: records.filter((id) => startedBy.has(id)).length,
      lost: records.filter((id) => !startedBy.has(id)).map((id) => `${id} (key ${this.sent.get(id) ?? '?'})`),
      doubled,
      notResumed: this.notResumed,
    };
  }
}
