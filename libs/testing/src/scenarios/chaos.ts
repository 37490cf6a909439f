import fc from 'fast-check';
import { Pool } from 'pg';
import type { IHeaders, Producer } from '@keyflow/kafka';
import { dlqTopicFor } from '@keyflow/ops';
import { AwaitTimeoutError, Collector, eventually } from '../await';
import { clusterControl, type ClusterControl } from '../cluster';
import { KCAT_CODECS, ensureKcat, produceWithKcat } from '../kcat';
import { OwnRedisServer, REDIS_AOF_ARGS } from '../redis-server';
import type { ServiceProcess } from '../service-process';
import {
  distinctEvents,
  OrchestratorHarness,
  TERMINAL_EVENTS,
  post,
  type Lifecycle,
} from '../harness/orchestrator';
import { Topic, taskTopic, type LogicalTopic } from '@keyflow/schemas';
import { CHAOS_ORDER_KEYS, ChaosTrigger, type TriggerStarts } from './chaos-trigger';

/**
 * The chaos suite (issue "A real cluster, real producers, real sizes"): a mixed load (order sagas, a quarter of them
 * declined and compensated; ETL maps whose items share one entity key; three-step runs) on orchestrator instances and
 * workers of the workers' test process, while faults are injected at seeded random moments. About a third of the
 * order sagas are started by records of a source topic the scenario creates, through the orchestrators' start trigger
 * `chaos-orders` (./chaos-trigger.ts), the rest over HTTP. Shared by the CI sample
 * (services/orchestrator/test/integration/chaos.int.spec.ts, one fault of each kind) and the full suite (`npm run chaos`, scripts/chaos.ts). It measures and
 * returns a {@link ChaosReport}; the caller asserts or prints.
 *
 * What is counted outside Redis, in PostgreSQL (tables `<prefix>_exec` and `<prefix>_order` of
 * services/workers/test/fixtures/test-handlers.ts, prefix `chaos_...`): one `_exec` row per handler execution
 * (append-only), and (entity, seq) per `seq` execution in execution order.
 */

export const FAULT_KINDS = [
  'kill-orchestrator',
  'kill-worker',
  'join',
  'leave',
  'redis-restart',
  'broker-restart',
  'poison',
  'compressed',
  'duplicate',
  'trigger-kill',
  'trigger-reset',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** One kind of fault. */
export interface Fault {
  kind: FaultKind;
  /** Why this fault cannot be injected here (it is then skipped, counted and the reason printed), else undefined. */
  unavailable(): Promise<string | undefined>;
  /**
   * Injects one fault; resolves with a one-line description once injected (healing, e.g. a restart, is awaited), or
   * with `{ skipped }` when there is nothing to inject it on yet (e.g. no record seen to duplicate).
   */
  inject(): Promise<string | { skipped: string }>;
}

export interface ChaosOptions {
  /** Test namespace label (topics, groups, PostgreSQL tables `chaos_<label>_...` get a fresh prefix). */
  label: string;
  /** Seed of the fault schedule and the load mix (the interleaving with real processes is not replayable). */
  seed: number;
  /** Faults injected. */
  faults: number;
  /** The first faults are one of each kind (shuffled), then random kinds: the CI sample. */
  eachKindFirst: boolean;
  /** Period over which the faults are spread and runs are started, in ms. */
  durationMs: number;
  /** Runs started per second during that period. */
  runsPerSecond: number;
  /** Orchestrator instances and worker processes kept alive (a killed one is replaced); joins add up to +2. */
  orchestrators: number;
  workers: number;
  /** Partitions of the run-keyed and task topics. */
  partitions: number;
  /** Deadline for every run to reach a terminal state after the last fault, in ms. */
  settleMs: number;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
  /**
   * The local stack whose brokers the `broker-restart` fault kills and restarts (default: `clusterControl()` over the
   * environment the stack was started with). With fewer than 3 brokers the fault is skipped with its reason.
   */
  cluster?: ClusterControl;
}

export interface ChaosReport {
  seed: number;
  /** Per kind: injected, skipped (and the reason of the last skip), failed to inject (see the timeline). */
  faults: Record<FaultKind, { injected: number; skipped: number; failed: number; reason?: string }>;
  /** The faults in order: `t+<s>s <kind>: <what>`. */
  timeline: string[];
  runs: {
    started: number;
    /** Runs the load could not start: no instance answered POST /runs with 202 within 60 s. */
    notStarted: number;
    /** Ended RunCompleted. */
    completed: number;
    /** Declined orders that ended RunCompensated, as designed. */
    compensated: number;
    /** `runId (workflow): outcome` for runs that ended otherwise than designed. */
    unexpected: string[];
    /** Runs with no terminal event by the deadline, in the live reader nor in wf.events read again afterwards. */
    lost: string[];
    /**
     * Runs whose terminal event the live wf.events reader (a kafkajs consumer through every fault) did not see by the
     * deadline, while a reader started afterwards found it in the topic: the consumer's miss, not a lost run.
     */
    missedByLiveReader: string[];
    /**
     * `runId: what` for ended runs whose lifecycle in wf.events (read again after the faults) has a gap or a
     * repeat: RunStarted not exactly once, or (for RunCompleted runs) a scheduled step with no StepCompleted. A
     * lifecycle consumer would see a run jump over a step.
     */
    incompleteLifecycle: string[];
  };
  effects: {
    /** Logical steps (idempotency keys) the finished runs must have executed. */
    expected: number;
    /** Of those, executed exactly once (one `_exec` row). */
    exactlyOnce: number;
    /** `key` expected and never executed. */
    missing: string[];
    /** `key xN (worker pids)`: executed more than once, not explained by a SIGKILL: a double effect. */
    duplicated: string[];
    /**
     * `key xN (worker pids)`: executed again because every earlier executor was SIGKILLed (after the effect, before
     * the completion record reached Redis): at-least-once, an effect deduped on `ctx.idempotencyKey` happens once.
     */
    reexecutedAfterKill: string[];
  };
  order: {
    /** Entities whose `seq` executions were checked. */
    entities: number;
    /** `entity: seq a after b`: a key's commands executed out of offset order. */
    violations: string[];
  };
  /**
   * Poison records sent, and how many of them reached a DLQ (distinct: a worker SIGKILLed after dead-lettering and
   * before committing dead-letters the record again when it is redelivered; `dlqRecords` counts every copy).
   */
  poison: { sent: number; deadLettered: number; dlqRecords: number };
  /**
   * The trigger load: records in the source topic, records whose run started, and the starts lost and doubled (both
   * must be empty), read from wf.events after the faults.
   */
  triggerStarts: TriggerStarts;
  /** Processes that exited without being killed or stopped by the suite: `<name> pid: exit <code>` + log tail. */
  exits: string[];
  /** Seconds from the first run started to the end of the settle wait. */
  seconds: number;
}

const WORKER_FIXTURE = 'services/workers/test/fixtures/test-worker.ts';
const WORKER_TYPES = ['seq', 'charge', 'refund', 'refuse'];
/** Poison records start with this (no Avro magic byte): every consumer must dead-letter them and go on. */
const POISON = 'not avro:';
const DUPLICATED_TOPICS: LogicalTopic[] = [
  taskTopic('seq'),
  taskTopic('charge'),
  taskTopic('refund'),
  Topic.TASK_RESULTS,
];

type Workflow = 'chaos-three' | 'chaos-order' | 'chaos-etl';
type Run = { workflow: Workflow; decline: boolean; items: number };

/** A seeded stream of integers (fast-check's generator, unbiased). */
function seededRandom(seed: number): { int(max: number): number; pick<T>(xs: readonly T[]): T } {
  const [stream] = fc.sample(fc.infiniteStream(fc.noBias(fc.integer({ min: 0, max: 2 ** 30 }))), {
    seed,
    numRuns: 1,
  });
  const it = stream[Symbol.iterator]();
  const int = (max: number) => (it.next().value as number) % max;
  return { int, pick: (xs) => xs[int(xs.length)] };
}

/** The idempotency keys a finished run must have executed once each (docs/workflows.md "One effect per logical step"). */
function expectedKeys(runId: string, r: Run): string[] {
  if (r.workflow === 'chaos-three') return ['a', 'b', 'c'].map((s) => `${runId}/${s}`);
  if (r.workflow === 'chaos-etl')
    return [...Array.from({ length: r.items }, (_, i) => `${runId}/items[${i}]`), `${runId}/load`];
  return r.decline
    ? ['reserve', 'charge', 'decline', 'charge.compensate'].map((s) => `${runId}/${s}`)
    : ['reserve', 'charge', 'ship'].map((s) => `${runId}/${s}`);
}

type Member = { name: string; kind: 'orchestrator' | 'worker'; p: ServiceProcess };

/** Runs the chaos suite. Throws only when the setup fails; what the runs did is in the report. */
export async function runChaos(o: ChaosOptions): Promise<ChaosReport> {
  const log = o.log ?? (() => undefined);
  const rnd = seededRandom(o.seed);
  const cluster = o.cluster ?? clusterControl();
  const h = new OrchestratorHarness(o.label);
  const table = `chaos_${h.ns.prefix.replace(/[^a-z0-9]/g, '_')}`;
  const pg = new Pool({ connectionString: process.env.POSTGRES_URL, max: 2 });
  const redis = await OwnRedisServer.start(REDIS_AOF_ARGS);
  const n = String(o.partitions);
  const trigger = new ChaosTrigger(h, o.partitions);
  const env = {
    TRIGGER_SOURCE_TOPIC: trigger.topic,
    REDIS_URL: redis.url,
    ORCHESTRATOR_PARTITIONS: n,
    TASK_PARTITIONS: n,
    WORKER_TASK_PARTITIONS: n,
    WORKER_RESULT_PARTITIONS: n,
    TEST_TABLE_PREFIX: table,
    WORKER_TASK_TYPES: WORKER_TYPES.join(','),
    WORKER_LEASE_MS: '3000',
    KEYFLOW_FATAL_EXIT_DELAY_MS: '500',
  };
  const members = new Map<string, Member>();
  const intended = new Set<ServiceProcess>(); // killed or stopped by the suite
  const exits: string[] = [];
  const starting = new Set<Promise<unknown>>();
  let seq = 0;
  let stopping = false;
  /** Set while `trigger-reset` holds every orchestrator down: orchestrator starts wait for it. */
  let orchestratorsHeld: Promise<void> | undefined;
  /** Orchestrator processes past that gate and not ready yet. */
  const orchestratorsOpening = new Set<Promise<unknown>>();

  /** Starts a member and keeps it: an exit the suite did not cause is recorded and the member is replaced. */
  const start = (kind: Member['kind'], extra: Record<string, string> = {}): Promise<void> => {
    const name = `${kind[0]}${seq++}`;
    const pending = (async () => {
      if (kind === 'orchestrator') while (orchestratorsHeld) await orchestratorsHeld;
      const opening =
        kind === 'orchestrator'
          ? h.startOrchestrator({ ...env, ORCHESTRATOR_INSTANCE_ID: name })
          : h.startWorker({ ...env, ...extra }, WORKER_FIXTURE);
      if (kind === 'orchestrator') {
        orchestratorsOpening.add(opening);
        void opening.catch(() => undefined).finally(() => orchestratorsOpening.delete(opening));
      }
      const p = await opening;
      members.set(name, { name, kind, p });
      void p.exited.then((code) => {
        members.delete(name);
        if (intended.has(p) || stopping) return;
        exits.push(`${name} pid ${p.proc.pid}: exit ${code}\n${p.logs.slice(-15).join('\n')}`);
        log(`${name} exited by itself (${code}); replacing it`);
        void start(kind);
      });
    })().catch(async (e: Error) => {
      if (stopping) return;
      exits.push(`${name}: did not start: ${e.message.split('\n').slice(0, 15).join('\n')}`);
      await new Promise((r) => setTimeout(r, 1000));
      if (!stopping) void start(kind);
    });
    starting.add(pending);
    void pending.finally(() => starting.delete(pending));
    return pending;
  };
  const live = (kind: Member['kind']) => [...members.values()].filter((m) => m.kind === kind);
  const stop = (m: Member, signal: 'SIGKILL' | 'SIGTERM') => {
    intended.add(m.p);
    members.delete(m.name);
    m.p.kill(signal);
  };

  const runs = new Map<string, Run>();
  const killedWorkerPids = new Set<string>();
  let brokerRestarting: number | undefined;
  const poison = { sent: 0 };
  const recent = new Map<
    LogicalTopic,
    Array<{ key: Buffer | null; value: Buffer | null; headers?: IHeaders }>
  >();
  let producer: Producer | undefined;
  let t0 = Date.now();
  const timeline: string[] = [];

  const faults = (): Fault[] => {
    const killOne = (kind: Member['kind']) => async () => {
      const victims = live(kind);
      if (victims.length === 0) return { skipped: `no ${kind} alive` };
      const v = rnd.pick(victims);
      if (kind === 'worker') killedWorkerPids.add(String(v.p.proc.pid));
      stop(v, 'SIGKILL');
      void start(kind); // its supervisor starts a new one
      return `SIGKILL ${v.name} (pid ${v.p.proc.pid}), replacement starting`;
    };
    const always = async () => undefined;
    return [
      { kind: 'kill-orchestrator', unavailable: always, inject: killOne('orchestrator') },
      { kind: 'kill-worker', unavailable: always, inject: killOne('worker') },
      {
        kind: 'join',
        unavailable: always,
        inject: async () => {
          const kind = rnd.pick(['orchestrator', 'worker'] as const);
          void start(kind);
          return `a ${kind} joins (${live(kind).length} ready before it)`;
        },
      },
      {
        kind: 'leave',
        unavailable: always,
        inject: async () => {
          const kind = rnd.pick(['orchestrator', 'worker'] as const);
          const all = live(kind);
          if (all.length === 0) return { skipped: `no ${kind} alive` };
          const v = rnd.pick(all);
          stop(v, 'SIGTERM');
          const min = kind === 'orchestrator' ? o.orchestrators : o.workers;
          if (all.length - 1 < min) void start(kind);
          return `SIGTERM ${v.name} (graceful leave)${all.length - 1 < min ? ', a new one joins' : ''}`;
        },
      },
      {
        kind: 'redis-restart',
        unavailable: always,
        inject: async () => {
          const down = 500 + rnd.int(2500);
          await redis.stop();
          await new Promise((r) => setTimeout(r, down));
          await redis.start();
          return `Redis stopped (SIGTERM, AOF) for ${down} ms and restarted`;
        },
      },
      {
        kind: 'broker-restart',
        unavailable: async () => {
          const brokers = await cluster.brokers().catch((e: Error) => e);
          if (brokers instanceof Error)
            return `infra/local/stack.sh cannot list the brokers: ${brokers.message}`;
          if (brokers.length < 3)
            return `the stack has ${brokers.length} broker; a 3-node cluster is needed (KEYFLOW_BROKERS=3 infra/local/stack.sh up)`;
          // One broker at a time: `stack.sh brokers` says up as soon as the process runs, before it answers.
          if (brokerRestarting !== undefined) return `broker ${brokerRestarting} is still restarting`;
          const down = brokers.filter((b) => !b.up).map((b) => b.index);
          return down.length ? `broker(s) ${down.join(',')} already down` : undefined;
        },
        inject: async () => {
          const brokers = await cluster.brokers();
          const i = rnd.pick(brokers).index;
          const down = 1_000 + rnd.int(4_000);
          brokerRestarting = i;
          await cluster.killBroker(i);
          // Its restart (a JVM start, up to a minute on a busy machine) goes on while the next faults come.
          const restart = (async () => {
            await new Promise((r) => setTimeout(r, down));
            await cluster.startBroker(i);
            log(`broker ${i} answers again`);
          })()
            .catch((e: Error) => exits.push(`broker ${i} did not restart: ${e.message}`))
            .finally(() => (brokerRestarting = undefined));
          starting.add(restart);
          void restart.finally(() => starting.delete(restart));
          return `broker ${i} of ${brokers.length} SIGKILLed, restarting in ${down} ms`;
        },
      },
      {
        kind: 'poison',
        unavailable: always,
        inject: async () => {
          // Bytes no decoder accepts, keyed like live work: a task command on an ETL key and an engine input on a run.
          const ids = [...runs.keys()];
          const etl = ids.filter((id) => runs.get(id)!.workflow === 'chaos-etl');
          const k = `${o.label}-poison-${poison.sent}`;
          const taskKey = etl.length ? `${rnd.pick(etl)}/etl` : k;
          const runKey = ids.length ? rnd.pick(ids) : k;
          await producer!.send({
            topic: h.codec.physical(taskTopic('seq')),
            acks: -1,
            messages: [{ key: taskKey, value: Buffer.from(`${POISON} ${k}`) }],
          });
          await producer!.send({
            topic: h.codec.physical(Topic.WF_REQUESTS),
            acks: -1,
            messages: [{ key: runKey, value: Buffer.from(`${POISON} ${k}`) }],
          });
          poison.sent += 2;
          return `poison on task.seq key ${taskKey} and wf.requests key ${runKey}`;
        },
      },
      {
        kind: 'compressed',
        unavailable: () =>
          ensureKcat().then(
            () => undefined,
            (e: Error) => e.message,
          ),
        inject: async () => {
          const codec = rnd.pick(KCAT_CODECS);
          const count = 1 + rnd.int(3);
          const records = Array.from({ length: count }, (_, i) => {
            const runId = `${o.label}-${o.seed}-z${runs.size}-${i}`;
            runs.set(runId, { workflow: 'chaos-three', decline: false, items: 0 });
            return {
              key: runId,
              value: h.startRunValue(runId, 'chaos-three', 'chaos'),
            };
          });
          // librdkafka reports a refused bootstrap broker as an error: only the brokers that are up.
          const up = await cluster.brokers().then(
            (bs) => bs.filter((b) => b.up && b.index !== brokerRestarting).map((b) => b.address),
            () => h.ns.infra.kafkaBrokers,
          );
          await produceWithKcat({
            brokers: up.length ? up : h.ns.infra.kafkaBrokers,
            topic: h.codec.physical(Topic.WF_REQUESTS),
            codec,
            records,
          });
          return `${count} StartRun in one ${codec} batch (kcat)`;
        },
      },
      {
        kind: 'trigger-kill',
        unavailable: always,
        inject: async () => {
          // The orchestrator reading the most source partitions is SIGKILLed halfway through a burst of records.
          const hosts = await trigger.hosts().catch(() => new Map<string, number[]>());
          const share = (m: Member) => hosts.get(m.name)?.length ?? 0;
          const all = live('orchestrator').sort((a, b) => share(b) - share(a));
          if (all.length === 0) return { skipped: 'no orchestrator alive' };
          const v = share(all[0]) > 0 ? all[0] : rnd.pick(all);
          const what = `SIGKILL ${v.name} (pid ${v.p.proc.pid}, trigger partitions [${hosts.get(v.name)?.join(',') ?? ''}])`;
          const burst: string[] = [];
          for (let i = 0; i < 12; i++) {
            if (i === 6) {
              stop(v, 'SIGKILL');
              void start('orchestrator');
            }
            const id = await produceOrder(extraOrders++);
            if (id) burst.push(id);
            await new Promise((r) => setTimeout(r, 100));
          }
          const s = await trigger.awaitStarted(`trigger-kill of ${v.name}`, burst, h.events);
          return `${what} after 6 of 12 trigger records, replacement starting; ${s === undefined ? 'the trigger did NOT start them all in 120 s' : `all 12 runs started ${s.toFixed(1)} s after the burst`}`;
        },
      },
      {
        kind: 'trigger-reset',
        unavailable: always,
        inject: async () => {
          // Every orchestrator hosts the trigger: the group is empty only when all are stopped (gracefully).
          let release = () => undefined as void;
          orchestratorsHeld = new Promise<void>((r) => (release = r));
          const stopped: string[] = [];
          let state: string;
          try {
            for (;;) {
              const all = live('orchestrator');
              if (all.length === 0 && orchestratorsOpening.size === 0) break;
              for (const m of all) {
                stop(m, 'SIGTERM');
                stopped.push(m.name);
                setTimeout(() => m.p.kill('SIGKILL'), 30_000).unref();
              }
              await Promise.allSettled([...all.map((m) => m.p.exited), ...orchestratorsOpening]);
            }
            state = await trigger.resetToEarliest(60_000);
          } finally {
            orchestratorsHeld = undefined;
            release();
          }
          await Promise.all(Array.from({ length: o.orchestrators }, () => start('orchestrator')));
          const probe = await produceOrder(extraOrders++);
          const s = probe ? await trigger.awaitStarted('trigger-reset', [probe], h.events) : undefined;
          return `SIGTERM ${stopped.join(',')}, group ${trigger.group} (${state}) reset to earliest, ${o.orchestrators} orchestrators restarted; ${s === undefined ? 'a record written after it did NOT start its run in 120 s' : `a record written after it started its run in ${s.toFixed(1)} s`}`;
        },
      },
      {
        kind: 'duplicate',
        unavailable: always,
        inject: async () => {
          const topic = rnd.pick(DUPLICATED_TOPICS.filter((t) => (recent.get(t) ?? []).length > 0));
          if (!topic) return { skipped: 'no record seen yet to duplicate' };
          const seen = recent.get(topic)!;
          const copies = Array.from({ length: 1 + rnd.int(3) }, () => seen[rnd.int(seen.length)]);
          await producer!.send({ topic: h.codec.physical(topic), acks: -1, messages: copies });
          return `${copies.length} record(s) of ${topic} delivered again`;
        },
      },
    ];
  };

  /** Starts one order saga through the trigger: a record keyed by one of a few order ids. */
  let extraOrders = 1_000_000; // `n` of the records the trigger faults write (the load's are its run numbers)
  const produceOrder = async (k: number): Promise<string | undefined> => {
    const decline = rnd.int(4) === 0;
    try {
      const id = await trigger.produce(k, `order-${rnd.int(CHAOS_ORDER_KEYS)}`, decline);
      runs.set(id, { workflow: 'chaos-order', decline, items: 0 });
      return id;
    } catch (e) {
      notStarted++;
      log(`trigger record ${k} could not be written in 90 s: ${(e as Error).message}`);
      return undefined;
    }
  };
  const urls = async () => Promise.all(live('orchestrator').map((m) => m.p.ready));
  /** Starts one run over HTTP on any live instance, the same Idempotency-Key on every try. */
  const startRun = async (k: number) => {
    if (rnd.int(100) < 30) return void (await produceOrder(k));
    const roll = rnd.int(100);
    const workflow: Workflow = roll < 40 ? 'chaos-three' : roll < 80 ? 'chaos-order' : 'chaos-etl';
    const run: Run = {
      workflow,
      decline: workflow === 'chaos-order' && rnd.int(4) === 0,
      items: 3 + rnd.int(6),
    };
    // chaos-etl maps over input.items (services/orchestrator/test/fixtures/test-workflows.ts); the others ignore it.
    const input = workflow === 'chaos-etl' ? { items: run.items } : { decline: run.decline, amount: 1 + k };
    const deadline = Date.now() + 60_000;
    for (let i = 0; Date.now() < deadline; i++) {
      const all = await urls();
      if (all.length === 0) {
        await new Promise((r) => setTimeout(r, 250));
        continue;
      }
      try {
        const res = await post(
          `${all[i % all.length]}/runs`,
          { workflow, input },
          { 'Idempotency-Key': `${o.label}-${o.seed}-${k}` },
        );
        if (res.status === 202) {
          runs.set(res.body.runId as string, run);
          return;
        }
      } catch {
        // that instance is gone: the next one
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    notStarted++;
    log(`run ${k} could not be started in 60 s`);
  };

  const reader = h.ns.kafka.consumer({ groupId: h.ns.groupId('chaos-capture'), maxWaitTimeInMs: 200 });
  const dlqs = h.ns.kafka.consumer({ groupId: h.ns.groupId('chaos-dlq'), maxWaitTimeInMs: 200 });
  const deadLettered = new Set<string>();
  let dlqRecords = 0;
  let notStarted = 0;
  try {
    await trigger.setup(); // the team's topic exists before the orchestrators that read it start
    await start('worker', { TEST_CREATE_TABLES: '1' }); // creates the PostgreSQL tables, then the others start
    await Promise.all([
      ...Array.from({ length: o.orchestrators }, () => start('orchestrator')),
      ...Array.from({ length: o.workers - 1 }, () => start('worker')),
    ]);
    if (live('orchestrator').length < o.orchestrators || live('worker').length < o.workers)
      throw new Error(`the processes did not start:\n${exits.join('\n')}`);
    await h.readEvents();
    await h.codec.registerTopics([Topic.WF_REQUESTS, ...DUPLICATED_TOPICS]);
    producer = h.ns.kafka.producer();
    await producer.connect();
    await reader.connect();
    for (const t of DUPLICATED_TOPICS) await reader.subscribe({ topic: h.codec.physical(t) });
    await reader.run({
      eachMessage: async ({ topic, message }) => {
        if (message.value?.toString().startsWith(POISON)) return; // duplicates are of real records only
        const logical = topic.slice(h.prefix.length) as LogicalTopic; // one of DUPLICATED_TOPICS
        const list = recent.get(logical) ?? [];
        list.push({ key: message.key, value: message.value, headers: message.headers });
        if (list.length > 100) list.shift();
        recent.set(logical, list);
      },
    });
    // The engine creates the DLQ topics at startup (one partition each).
    const dlqTopics = [
      dlqTopicFor(h.codec.physical(taskTopic('seq'))),
      dlqTopicFor(h.codec.physical(Topic.WF_REQUESTS)),
    ];
    await dlqs.connect();
    for (const topic of dlqTopics) await dlqs.subscribe({ topic, fromBeginning: true });
    await dlqs.run({
      eachMessage: async ({ topic, message }) => {
        if (!message.value?.toString().startsWith(POISON)) return;
        dlqRecords++;
        deadLettered.add(`${topic} ${message.value.toString()}`);
      },
    });
    log(
      `seed ${o.seed}: ${o.orchestrators} orchestrators, ${o.workers} workers, PostgreSQL tables ${table}_*`,
    );

    // The schedule: fault i at a seeded moment in its slot of the period.
    const kinds = faults();
    const byKind = new Map(kinds.map((f) => [f.kind, f]));
    const report: ChaosReport['faults'] = Object.fromEntries(
      FAULT_KINDS.map((k) => [k, { injected: 0, skipped: 0, failed: 0 }]),
    ) as ChaosReport['faults'];
    const shuffled = FAULT_KINDS.map((k) => ({ k, r: rnd.int(1000) }));
    shuffled.sort((a, b) => a.r - b.r);
    // Faults start after a lead (5 s at most) so that there is load to hit, and end with the load.
    const lead = Math.min(5_000, o.durationMs / 10);
    const plan = Array.from({ length: o.faults }, (_, i) => ({
      kind: o.eachKindFirst && i < FAULT_KINDS.length ? shuffled[i].k : rnd.pick(FAULT_KINDS),
      at: lead + ((i + rnd.int(1000) / 1000) * (o.durationMs - lead)) / o.faults,
    }));
    t0 = Date.now();
    const loadEnd = t0 + o.durationMs;
    const load = (async () => {
      let k = 0;
      const pending: Promise<void>[] = [];
      while (Date.now() < loadEnd) {
        pending.push(startRun(k++));
        await new Promise((r) => setTimeout(r, 1000 / o.runsPerSecond));
      }
      await Promise.all(pending);
    })();
    for (const f of plan) {
      const wait = t0 + f.at - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const fault = byKind.get(f.kind)!;
      const t = `t+${((Date.now() - t0) / 1000).toFixed(1)}s ${f.kind}`;
      let reason = await fault.unavailable();
      let what: string | undefined;
      if (!reason)
        try {
          const r = await fault.inject();
          if (typeof r === 'string') what = r;
          else reason = r.skipped;
        } catch (e) {
          timeline.push(`${t}: FAILED to inject: ${(e as Error).message.split('\n')[0]}`);
          log(`${t}: FAILED to inject: ${(e as Error).message}`);
          report[f.kind].failed++;
          continue;
        }
      if (reason) {
        report[f.kind].skipped++;
        report[f.kind].reason = reason;
        timeline.push(`${t}: skipped (${reason})`);
        log(`${t}: skipped (${reason})`);
        continue;
      }
      report[f.kind].injected++;
      timeline.push(`${t}: ${what}`);
      log(`${t}: ${what}`);
    }
    await load;
    log(`load and faults over: ${runs.size} runs started; waiting for them to end`);

    // Every run must reach a terminal state within the settle deadline.
    const ended = () =>
      new Set(h.events.items.filter((e) => TERMINAL_EVENTS.has(e.event)).map((e) => e.value.runId));
    try {
      await eventually('every run ended', () => [...runs.keys()].filter((id) => !ended().has(id)).length, {
        until: (c) => c === 0,
        timeoutMs: o.settleMs,
        intervalMs: 500,
      });
    } catch (e) {
      if (!(e instanceof AwaitTimeoutError)) throw e;
    }
    await Promise.allSettled([...starting]);
    const seconds = (Date.now() - t0) / 1000;
    stopping = true;

    // wf.events read again from the beginning, after the faults (what the topic holds, not what a consumer that
    // lived through them saw), until it has caught up with every end the live reader saw.
    const unended = [...runs.keys()].filter((id) => !ended().has(id));
    const again = new Collector<Lifecycle>();
    await h.readEvents(again, 'events-after-chaos');
    const seenLive = ended();
    await eventually(
      'the second wf.events reader caught up',
      () => new Set(again.items.filter((e) => TERMINAL_EVENTS.has(e.event)).map((e) => e.value.runId)),
      { until: (s) => [...seenLive].every((id) => s.has(id)), timeoutMs: 120_000, intervalMs: 500 },
    ).catch((e) => {
      if (!(e instanceof AwaitTimeoutError)) throw e;
    });
    const missedByLiveReader = unended.filter((id) =>
      again.items.some((e) => e.value.runId === id && TERMINAL_EVENTS.has(e.event)),
    );
    const incompleteLifecycle = lifecycleGaps(distinctEvents(again), new Set(runs.keys()));
    const triggerStarts = await trigger.report([...h.events.items, ...again.items]);

    // Outcomes.
    const outcome = new Map<string, string>();
    for (const e of [...h.events.items, ...again.items])
      if (TERMINAL_EVENTS.has(e.event)) outcome.set(e.value.runId, e.event);
    const lost: string[] = [];
    const unexpected: string[] = [];
    let completed = 0;
    let compensated = 0;
    const expected: string[] = [];
    for (const [id, r] of runs) {
      const end = outcome.get(id);
      if (!end) lost.push(`${id} (${r.workflow})`);
      else if (r.decline && end === 'RunCompensated') compensated++;
      else if (!r.decline && end === 'RunCompleted') completed++;
      else unexpected.push(`${id} (${r.workflow}${r.decline ? ', declined' : ''}): ${end}`);
      if (end) expected.push(...expectedKeys(id, r));
    }

    // Effects and order, from PostgreSQL.
    const execs = await pg.query<{ idempotency_key: string; n: string; workers: string }>(
      `select idempotency_key, count(*) n, string_agg(worker, ',' order by at) workers from ${table}_exec group by idempotency_key`,
    );
    const count = new Map(execs.rows.map((r) => [r.idempotency_key, Number(r.n)]));
    // A key executed again after its first executor was SIGKILLed (between the effect and the completion record) is
    // the at-least-once window docs/development.md "Chaos suite" names; any other second execution is a double effect.
    const twice = execs.rows.filter((r) => Number(r.n) > 1);
    const afterKill = (r: (typeof twice)[number]) =>
      r.workers
        .split(',')
        .slice(0, -1)
        .every((w) => killedWorkerPids.has(w));
    const describe = (r: (typeof twice)[number]) => `${r.idempotency_key} x${r.n} (worker pids ${r.workers})`;
    const duplicated = twice.filter((r) => !afterKill(r)).map(describe);
    const reexecutedAfterKill = twice.filter(afterKill).map(describe);
    const orderRows = await pg.query<{ entity: string; seq: number }>(
      `select entity, seq from ${table}_order order by entity, id`,
    );
    const violations: string[] = [];
    const last = new Map<string, number>();
    for (const r of orderRows.rows) {
      const prev = last.get(r.entity);
      if (prev !== undefined && r.seq < prev) violations.push(`${r.entity}: seq ${r.seq} after ${prev}`);
      last.set(r.entity, r.seq);
    }
    return {
      seed: o.seed,
      faults: report,
      timeline,
      runs: {
        started: runs.size,
        notStarted,
        completed,
        compensated,
        unexpected,
        lost,
        missedByLiveReader,
        incompleteLifecycle,
      },
      effects: {
        expected: expected.length,
        exactlyOnce: expected.filter((k) => count.get(k) === 1).length,
        missing: expected.filter((k) => !count.has(k)),
        duplicated,
        reexecutedAfterKill,
      },
      order: { entities: last.size, violations },
      poison: { sent: poison.sent, deadLettered: deadLettered.size, dlqRecords },
      triggerStarts,
      exits,
      seconds,
    };
  } finally {
    stopping = true;
    await Promise.allSettled([...starting]);
    await Promise.allSettled([
      reader.disconnect(),
      dlqs.disconnect(),
      producer?.disconnect(),
      trigger.close(),
    ]);
    await h.teardown();
    await redis.remove();
    if (!process.env.KEYFLOW_CHAOS_KEEP_TABLES) {
      const { rows } = await pg.query<{ t: string }>(
        `select tablename t from pg_tables where tablename like $1`,
        [`${table}\\_%`],
      );
      for (const { t } of rows) await pg.query(`drop table if exists ${t}`);
    }
    await pg.end();
  }
}

/**
 * The ended runs among `ids` whose lifecycle in `events` (distinct by event id) has a gap or a repeat (see
 * ChaosReport.runs.incompleteLifecycle), as `runId: what`. A map's items are scheduled one by one (`<map>[i]`) and
 * complete as one StepCompleted of the map; a choice completes without being scheduled.
 */
export function lifecycleGaps(events: Lifecycle[], ids: Set<string>): string[] {
  const byRun = new Map<string, Lifecycle[]>();
  for (const e of events) {
    if (!ids.has(e.value.runId)) continue;
    const evs = byRun.get(e.value.runId);
    if (evs) evs.push(e);
    else byRun.set(e.value.runId, [e]);
  }
  const gaps: string[] = [];
  for (const [id, evs] of byRun) {
    const end = evs.find((e) => TERMINAL_EVENTS.has(e.event));
    if (!end) continue; // not ended: counted as lost, not here
    const started = evs.filter((e) => e.event === 'RunStarted').length;
    if (started !== 1) gaps.push(`${id}: ${started} RunStarted`);
    if (end.event !== 'RunCompleted') continue;
    const steps = (kind: string) =>
      new Set(evs.filter((e) => e.event === kind).map((e) => String(e.value.stepId).replace(/\[\d+\]$/, '')));
    const completed = steps('StepCompleted');
    const open = [...steps('StepScheduled')].filter((s) => !completed.has(s));
    if (open.length) gaps.push(`${id}: RunCompleted with no StepCompleted for ${open.join(',')}`);
  }
  return gaps;
}
