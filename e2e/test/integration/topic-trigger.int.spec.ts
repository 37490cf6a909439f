import type { KafkaMessage } from '@keyflow/kafka';
import { DLQ_HEADERS, header } from '@keyflow/ops';
import {
  Collector,
  OrchestratorHarness,
  distinctEvents,
  eventually,
  javaKafkaClient,
  kcatMissing,
  keyflowCli,
  type Lifecycle,
  type ServiceProcess,
} from '@keyflow/testing';
import {
  createTopicWithJavaAdmin,
  produceJsonWithJavaClient,
  produceJsonWithKcat,
  resetGroupToEarliest,
  type JsonRecord,
} from '@keyflow/testing/producers';
import { Pool } from 'pg';

/**
 * Issue 42's acceptance test of topic triggers: a team topic that keyflow did not create (Kafka's own TopicCommand, 6
 * partitions) gets N keyed JSON order records, 70 % from the Java client (lz4) and 30 % from kcat (zstd); the
 * `orders` trigger of examples/test-workloads/src/trigger-orchestrator.ts starts one `trigger-order` run per record.
 * Checked: exactly N runs start (distinct run ids of RunStarted on wf.events, none started twice), each key's runs
 * start in offset order, each step's handler runs once (the workers' test process appends one `_exec` row per
 * execution in PostgreSQL). The orchestrator (it hosts the trigger) is SIGKILLed mid-stream, and again after the
 * trigger's group is reset to the earliest with Kafka's own ConsumerGroupCommand: still exactly N runs, no second
 * effect. Then 20 records that fail the input schema (and 4 that are not JSON) land in the trigger's DLQ with their
 * triage headers; after the fix (TRIGGER_ACCEPT_POISON=1) `keyflow dlq redrive` sends the 20 back: exactly N + 20 runs.
 *
 * Size: TRIGGER_E2E_RECORDS (default 300, the CI sample: 100 keys of 3 records; `npm run e2e:triggers` runs 10,000).
 */

const N = Number(process.env.TRIGGER_E2E_RECORDS ?? 300);
/** Order ids: 200 for the full size, so each key has many records (at least 3 each for a small N). */
const KEYS = Math.max(1, Math.min(200, Math.floor(N / 3)));
const JAVA_SHARE = Math.round(N * 0.7);
const POISON = 20;
const GARBAGE = 4;
const PARTITIONS = 6;
/** How long the phases may take, ms: about 25 runs a second of two steps each on a busy 2-core machine, at the least. */
const SETTLE_MS = 180_000 + N * 40;
/** Poll period of the waits, ms (each poll goes over every lifecycle event read, or asks the broker). */
const POLL_MS = 250;
const ORCHESTRATOR = 'examples/test-workloads/src/trigger-orchestrator.ts';
const WORKER = 'services/workers/test/fixtures/test-worker.ts';

jest.setTimeout(4 * SETTLE_MS + 600_000);

/** Record i of the topic: order `order-<i mod KEYS>`, its `seq`-th record (seq rises with i for one key). */
const orderRecord = (i: number): JsonRecord => ({
  key: `order-${i % KEYS}`,
  value: { orderId: `order-${i % KEYS}`, seq: Math.floor(i / KEYS), amount: 1 + (i % 97) },
});

/** `<trigger>:<topic>:<partition>:<offset>` (a topic name holds no colon). */
function sourceOf(runId: string): { topic: string; partition: number; offset: number } {
  const [, topic, partition, offset] = runId.split(':');
  return { topic, partition: Number(partition), offset: Number(offset) };
}

/** The test's processes, topics and stores; each method one step of the scenario. */
class TriggerScenario {
  readonly h = new OrchestratorHarness('topic-trigger');
  readonly source = this.h.ns.topic('team-orders');
  /** The trigger's consumer group and DLQ (docs/triggers.md): under the deployment's topic prefix. */
  readonly group = `${this.h.prefix}keyflow-trigger-orders`;
  readonly dlqTopic = `${this.h.prefix}trigger.orders.dlq`;
  readonly table = `trig_${this.h.ns.prefix.replace(/[^a-z0-9]/g, '_')}`;
  readonly pg = new Pool({ connectionString: process.env.POSTGRES_URL, max: 2 });
  readonly dlq = new Collector<KafkaMessage>();
  orchestrator?: ServiceProcess;
  classpath = '';
  readonly log = (line: string) => console.log(`[topic-trigger] ${line}`);

  env(extra: Record<string, string> = {}): Record<string, string> {
    return {
      TRIGGER_SOURCE_TOPIC: this.source,
      TRIGGER_MAX_IN_FLIGHT: String(Math.max(20, Math.floor(N / 20))),
      TEST_TABLE_PREFIX: this.table,
      ORCHESTRATOR_PARTITIONS: String(PARTITIONS),
      TASK_PARTITIONS: String(PARTITIONS),
      WORKER_TASK_PARTITIONS: String(PARTITIONS),
      WORKER_RESULT_PARTITIONS: String(PARTITIONS),
      ...extra,
    };
  }

  async setUp(classpath: string): Promise<void> {
    this.classpath = classpath;
    const brokers = this.h.ns.infra.kafkaBrokers;
    await createTopicWithJavaAdmin({ classpath, brokers, topic: this.source, partitions: PARTITIONS });
    await this.h.startWorker(
      this.env({ TEST_CREATE_TABLES: '1', WORKER_TASK_TYPES: 'seq', WORKER_LEASE_MS: '3000' }),
      WORKER,
    );
    await this.startOrchestrator();
    await this.h.readEvents(); // wf.events exists once the orchestrator is ready
  }

  async startOrchestrator(extra: Record<string, string> = {}): Promise<ServiceProcess> {
    this.orchestrator = await this.h.startOrchestrator(this.env(extra), ORCHESTRATOR);
    return this.orchestrator;
  }

  /** SIGKILL (a crash) or SIGTERM (a stop) of the orchestrator; resolves once it has exited. */
  async stopOrchestrator(signal: 'SIGKILL' | 'SIGTERM'): Promise<void> {
    const p = this.orchestrator!;
    p.kill(signal);
    await p.exited;
    this.log(`orchestrator pid ${p.proc.pid} ${signal === 'SIGKILL' ? 'SIGKILLed' : 'stopped'}`);
  }

  /** RunStarted events by run id (distinct event ids: a reader that restarted may have seen one twice). */
  started(): Map<string, Lifecycle[]> {
    const byRun = new Map<string, Lifecycle[]>();
    for (const e of distinctEvents(this.h.events))
      if (e.event === 'RunStarted') byRun.set(e.value.runId, [...(byRun.get(e.value.runId) ?? []), e]);
    return byRun;
  }

  ended(event = 'RunCompleted'): Set<string> {
    return new Set(this.h.events.items.filter((e) => e.event === event).map((e) => e.value.runId));
  }

  /** Waits until `count` distinct runs have started (and no more, checked by the caller). */
  async startedRuns(count: number, what: string): Promise<void> {
    const check = () => this.failFast();
    await eventually(what, () => this.started().size, {
      until: (n) => n >= count,
      timeoutMs: SETTLE_MS,
      intervalMs: POLL_MS,
      check,
    });
  }

  async completedRuns(count: number): Promise<void> {
    await eventually(`${count} runs completed`, () => this.ended().size, {
      until: (n) => n >= count,
      timeoutMs: SETTLE_MS,
      intervalMs: POLL_MS,
      check: () => this.failFast(),
    });
  }

  /** Ends a wait at once when a run failed (a record the trigger mapped wrong, a step that gave up). */
  failFast(): void {
    const failed = [...this.ended('RunFailed')];
    if (failed.length) throw new Error(`runs failed: ${failed.slice(0, 5).join(', ')}`);
  }

  /** The trigger group's lag on the source topic: records not yet turned into a run request. */
  async lag(): Promise<number> {
    const admin = await this.h.ns.getAdmin();
    const ends = await admin.fetchTopicOffsets(this.source);
    const [committed] = await admin.fetchOffsets({ groupId: this.group, topics: [this.source] });
    const at = new Map(committed.partitions.map((p) => [p.partition, Number(p.offset)]));
    return ends.reduce((sum, p) => sum + Number(p.high) - Math.max(0, at.get(p.partition) ?? 0), 0);
  }

  /** Handler executions per idempotency key (`<runId>/<step>`), from the workers' `_exec` rows. */
  async executions(): Promise<Map<string, number>> {
    const r = await this.pg.query<{ k: string; n: string }>(
      `select idempotency_key k, count(*) n from ${this.table}_exec group by 1`,
    );
    return new Map(r.rows.map((x) => [x.k, Number(x.n)]));
  }

  /**
   * Reads the trigger's DLQ (read_committed) into {@link dlq}, once keyflow has created it (the reader must not have
   * the broker auto-create it).
   */
  async readDlq(): Promise<void> {
    const admin = await this.h.ns.getAdmin();
    await eventually(
      `keyflow created ${this.dlqTopic}`,
      async () => (await admin.listTopics()).includes(this.dlqTopic),
      {
        timeoutMs: 60_000,
        intervalMs: 500,
      },
    );
    const c = this.h.ns.kafka.consumer({
      groupId: this.h.ns.groupId('dlq-reader'),
      maxWaitTimeInMs: 100,
      allowAutoTopicCreation: false,
    });
    await c.connect();
    await c.subscribe({ topic: this.dlqTopic, fromBeginning: true });
    await c.run({ eachMessage: async ({ message }) => this.dlq.push(message) });
    this.readers.push(c);
  }
  readonly readers: Array<{ disconnect(): Promise<void> }> = [];

  async teardown(): Promise<void> {
    await Promise.allSettled(this.readers.map((c) => c.disconnect()));
    await this.h.teardown();
    await this.pg
      .query(
        `drop table if exists ${this.table}_exec, ${this.table}_attempt, ${this.table}_order,
      ${this.table}_effect, ${this.table}_fix, ${this.table}_abort`,
      )
      .catch(() => undefined);
    await this.pg.end();
  }
}

/**
 * Exactly `expected` runs started, none twice; those of the source topic in offset order per key (RunStarted times
 * never go back as the offsets rise), and the records of one key on one partition in the order they were written.
 */
function expectStartedOnceInOrder(s: TriggerScenario, expected: number): void {
  const started = s.started();
  const twice = [...started].filter(([, es]) => es.length > 1).map(([id, es]) => `${id} x${es.length}`);
  expect(twice).toEqual([]);
  expect(started.size).toBe(expected);
  const byKey = new Map<string, Array<{ offset: number; partition: number; seq: number; at: number }>>();
  for (const [runId, [e]] of started) {
    const src = sourceOf(runId);
    if (src.topic !== s.source) continue; // a redriven record (the trigger's own topic)
    const input = JSON.parse(e.value.input as string) as { orderId: string; seq: number };
    const at = Number((e.value.metadata as unknown as { occurredAt: number }).occurredAt);
    byKey.set(input.orderId, [...(byKey.get(input.orderId) ?? []), { ...src, seq: input.seq, at }]);
  }
  const outOfOrder: string[] = [];
  for (const [key, runs] of byKey) {
    runs.sort((a, b) => a.offset - b.offset);
    if (new Set(runs.map((r) => r.partition)).size !== 1) outOfOrder.push(`${key}: on several partitions`);
    for (let i = 1; i < runs.length; i++) {
      if (runs[i].seq <= runs[i - 1].seq)
        outOfOrder.push(`${key}: seq ${runs[i].seq} after ${runs[i - 1].seq}`);
      if (runs[i].at < runs[i - 1].at)
        outOfOrder.push(
          `${key}: offset ${runs[i].offset} started ${runs[i - 1].at - runs[i].at} ms before offset ${runs[i - 1].offset}`,
        );
    }
  }
  expect(outOfOrder.slice(0, 20)).toEqual([]);
}

/** Each step of each completed run executed exactly once (one `_exec` row per idempotency key, none twice). */
async function expectOneEffectPerStep(s: TriggerScenario, runs: number): Promise<void> {
  const exec = await s.executions();
  const twice = [...exec].filter(([, n]) => n > 1).map(([k, n]) => `${k} x${n}`);
  expect(twice.slice(0, 20)).toEqual([]);
  const completed = s.ended();
  const missing = [...completed]
    .flatMap((id) => ['reserve', 'ship'].map((st) => `${id}/${st}`))
    .filter((k) => !exec.has(k));
  expect(missing.slice(0, 20)).toEqual([]);
  expect(completed.size).toBe(runs);
}

describe(`topic trigger: ${N} records of a team topic (Java client and kcat) start ${N} runs exactly once`, () => {
  const s = new TriggerScenario();
  afterAll(() => s.teardown());

  it(`starts exactly ${N} runs, each key in offset order, through an orchestrator SIGKILL, a group reset to earliest and a second SIGKILL; ${POISON} poison records go to the trigger's DLQ with triage headers and start ${POISON} runs once redriven after the fix`, async () => {
    const java = javaKafkaClient();
    const noKcat = await kcatMissing();
    if ('missing' in java || noKcat)
      return console.warn(`skipped: ${'missing' in java ? java.missing : noKcat}`);
    await s.setUp(java.classpath);
    await produceAndCrash(s);
    await replayFromEarliest(s);
    await poisonAndRedrive(s);
  });
});

/** Phase 1: 70 % by the Java client, an orchestrator SIGKILL mid-stream, 30 % by kcat (zstd) while it restarts. */
async function produceAndCrash(s: TriggerScenario): Promise<void> {
  const brokers = s.h.ns.infra.kafkaBrokers;
  const records = Array.from({ length: N }, (_, i) => orderRecord(i));
  await produceJsonWithJavaClient({
    classpath: s.classpath,
    brokers,
    topic: s.source,
    codec: 'lz4',
    records: records.slice(0, JAVA_SHARE),
  });
  s.log(`${JAVA_SHARE} records produced by the Java client (lz4)`);
  await s.startedRuns(Math.ceil(JAVA_SHARE / 10), 'a tenth of the Java records started');
  const before = s.started().size;
  await s.stopOrchestrator('SIGKILL');
  s.log(`SIGKILL with ${before} of ${JAVA_SHARE} runs started`);
  await Promise.all([
    produceJsonWithKcat({ brokers, topic: s.source, codec: 'zstd', records: records.slice(JAVA_SHARE) }),
    s.startOrchestrator(),
  ]);
  s.log(`${N - JAVA_SHARE} records produced by kcat (zstd); orchestrator restarted`);
  await s.startedRuns(N, `${N} runs started`);
  await eventually('the trigger group caught up', () => s.lag(), {
    until: (l) => l === 0,
    timeoutMs: SETTLE_MS,
    intervalMs: POLL_MS,
  });
  await s.completedRuns(N);
  expectStartedOnceInOrder(s, N);
  await expectOneEffectPerStep(s, N);
}

/** Phase 2: the group reset to earliest (Kafka's tool), the orchestrator SIGKILLed mid-replay: no run again. */
async function replayFromEarliest(s: TriggerScenario): Promise<void> {
  await s.stopOrchestrator('SIGTERM');
  const brokers = s.h.ns.infra.kafkaBrokers;
  // The group empties once its member has left (SIGTERM leaves at once; a coordinator may still be rebalancing).
  const table = await eventually(
    'the trigger group reset to earliest',
    () =>
      resetGroupToEarliest({ classpath: s.classpath, brokers, group: s.group, topic: s.source }).catch(
        (e: Error) => (s.log(e.message.slice(0, 300)), undefined),
      ),
    { timeoutMs: 120_000, intervalMs: 2_000 },
  );
  s.log(`group reset:\n${table}`);
  expect(await s.lag()).toBe(N);
  await s.startOrchestrator();
  const mid = await eventually('the replay under way', () => s.lag(), {
    until: (l) => l < N,
    timeoutMs: SETTLE_MS,
    intervalMs: POLL_MS,
  });
  await s.stopOrchestrator('SIGKILL');
  s.log(`SIGKILL mid-replay with ${mid} of ${N} records left`);
  await s.startOrchestrator();
  await eventually('the replay done', () => s.lag(), {
    until: (l) => l === 0,
    timeoutMs: SETTLE_MS,
    intervalMs: POLL_MS,
  });
  expectStartedOnceInOrder(s, N);
  await expectOneEffectPerStep(s, N);
}

/** Phase 3: poison records dead-lettered with triage headers, the fix, `keyflow dlq redrive`: N + 20 runs. */
async function poisonAndRedrive(s: TriggerScenario): Promise<void> {
  const poison: JsonRecord[] = Array.from({ length: POISON }, (_, i) => ({
    key: `poison-${i}`,
    // Valid JSON that fails trigger-order's input schema: amount is not a number, or seq is missing.
    value:
      i % 2 ? { orderId: `poison-${i}`, seq: i, amount: 'twelve' } : { orderId: `poison-${i}`, amount: 3 },
  }));
  const garbage = Array.from({ length: GARBAGE }, (_, i) => ({ key: 'garbage', value: `not json ${i}` }));
  await produceJsonWithJavaClient({
    classpath: s.classpath,
    brokers: s.h.ns.infra.kafkaBrokers,
    topic: s.source,
    codec: 'lz4',
    records: [...poison, ...garbage],
  });
  await s.readDlq(); // once the first dead letter made keyflow create the DLQ, if it creates it lazily
  const dead = await s.dlq.wait(POISON + GARBAGE, SETTLE_MS, 'poison records in the trigger DLQ');
  expectTriageHeaders(s, dead);
  expect(s.started().size).toBe(N);

  // The fix: the input mapping repairs what the schema refused. The records that are not JSON are discarded.
  await s.stopOrchestrator('SIGTERM');
  const api = await (await s.startOrchestrator({ TRIGGER_ACCEPT_POISON: '1' })).ready;
  const cliEnv = { ...s.h.env(), KEYFLOW_API_URL: api };
  const discarded = await keyflowCli(
    ['dlq', 'discard', 'trigger.orders.dlq', '--key', 'garbage', '--json'],
    cliEnv,
  );
  if (discarded.code !== 0) throw new Error(`keyflow dlq discard: exit ${discarded.code}: ${discarded.err}`);
  expect(discarded.json().moved).toBe(GARBAGE);
  const redriven = await keyflowCli(['dlq', 'redrive', 'trigger.orders.dlq', '--json'], cliEnv);
  if (redriven.code !== 0)
    throw new Error(`keyflow dlq redrive: exit ${redriven.code}: ${redriven.out} ${redriven.err}`);
  // To the trigger's own topic, which it reads too: never to the team's source topic.
  expect(redriven.json()).toMatchObject({
    moved: POISON,
    refused: 0,
    byTopic: { [`${s.h.prefix}trigger.orders`]: POISON },
  });
  expect(Object.keys(redriven.json().byTopic)).not.toContain(s.source);

  await s.startedRuns(N + POISON, `${N + POISON} runs started`);
  await s.completedRuns(N + POISON);
  expectStartedOnceInOrder(s, N + POISON);
  await expectOneEffectPerStep(s, N + POISON);
  const poisonRuns = [...s.started().values()].filter(([e]) =>
    e.value.businessKey?.toString().startsWith('poison-'),
  );
  expect(poisonRuns).toHaveLength(POISON);
  expect(s.dlq.items).toHaveLength(POISON + GARBAGE); // none dead-lettered again
}

/** Every DLQ record carries its triage headers: error code by kind, class, message, source partition and offset. */
function expectTriageHeaders(s: TriggerScenario, dead: KafkaMessage[]): void {
  const codes = dead.map((m) => [m.key?.toString(), header(m.headers, DLQ_HEADERS.errorCode)]);
  expect(codes.filter(([k]) => k === 'garbage').map(([, c]) => c)).toEqual(
    Array(GARBAGE).fill('TRIGGER_RECORD_UNDECODABLE'),
  );
  expect(codes.filter(([k]) => k?.startsWith('poison-')).map(([, c]) => c)).toEqual(
    Array(POISON).fill('TRIGGER_INPUT_INVALID'),
  );
  for (const m of dead) {
    for (const h of [DLQ_HEADERS.errorClass, DLQ_HEADERS.errorMessage, DLQ_HEADERS.originalTopic])
      expect(header(m.headers, h)).toBeTruthy();
    expect(Number(header(m.headers, DLQ_HEADERS.originalPartition))).toBeGreaterThanOrEqual(0);
    expect(header(m.headers, DLQ_HEADERS.originalOffset)).toMatch(/^\d+$/);
    expect(header(m.headers, DLQ_HEADERS.consumerGroup)).toBe(s.group);
  }
}
