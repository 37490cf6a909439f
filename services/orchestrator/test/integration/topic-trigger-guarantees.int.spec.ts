import { degradedWith, eventually, healthOf } from '@keyflow/testing';
import type { Producer } from '@keyflow/kafka';
import {
  distinctEvents,
  keyflowCli,
  OrchestratorHarness,
  type Lifecycle,
  type ServiceProcess,
} from './support';

jest.setTimeout(240_000);

const FIXTURE = 'services/orchestrator/test/fixtures/trigger-orchestrator.ts';

/**
 * Topic trigger guarantees beyond topic-trigger.int.spec.ts, each against a fresh namespace: `serializeBy: 'key'`
 * (one run per key at a time), backpressure at maxInFlight, a DLQ redrive through the trigger's own topic keeping the
 * record's run id, signals by business key (and TRIGGER_NO_SUCH_RUN after awaitRunMs), a source topic created late.
 */
describe('topic trigger guarantees', () => {
  const stacks: Stack[] = [];
  afterEach(async () => {
    await Promise.all(stacks.splice(0).map((s) => s.close()));
  }, 60_000);
  const stack = async (name: string, createSource = true) => {
    const s = await newStack(name, createSource);
    stacks.push(s);
    return s;
  };

  it("serializeBy key: a key's next run starts only after its previous run ended, other keys' runs meanwhile", async () => {
    const s = await stack('trg-bykey');
    const o = await s.start({ TRIGGER_SERIALIZE_BY: 'key' });
    const id = (offset: number) => `orders:${s.source}:0:${offset}`;
    const rec = (key: string, seq: number) => ({ key, value: JSON.stringify({ key, seq }), partition: 0 });
    // Offsets 0..3 of partition 0: k/0, k/1, other/0, k/2.
    await s.producer.send({
      topic: s.source,
      messages: [rec('k', 0), rec('k', 1), rec('other', 0), rec('k', 2)],
    });
    // other/0 (offset 2) started: the trigger has read past k/1 (offset 1), which must still wait for run k/0.
    await s.started([id(0), id(2)], o);
    expect(s.startedIds()).not.toContain(id(1));
    expect(s.startedIds()).not.toContain(id(3));

    await s.signal(id(0));
    await s.started([id(1)], o);
    await s.ended(id(0));
    expect(s.at('RunStarted', id(1))).toBeGreaterThanOrEqual(s.at('RunCompleted', id(0))!);
    expect(s.startedIds()).not.toContain(id(3));

    await s.signal(id(1));
    await s.started([id(3)], o);
    await s.ended(id(1));
    expect(s.at('RunStarted', id(3))).toBeGreaterThanOrEqual(s.at('RunCompleted', id(1))!);
    expect(s.startedIds().sort()).toEqual([id(0), id(1), id(2), id(3)].sort());
  });

  it('backpressure: at most maxInFlight runs in flight; the trigger pauses with lag and resumes as runs end', async () => {
    const s = await stack('trg-pressure');
    const o = await s.start({ TRIGGER_MAX_IN_FLIGHT: '5' });
    const url = await o.ready;
    const keys = Array.from({ length: 20 }, (_, i) => `bp-${i}`);
    await s.producer.send({
      topic: s.source,
      messages: keys.map((key) => ({ key, value: JSON.stringify({ key, seq: 0 }) })),
    });
    const st = await eventually('the trigger paused at maxInFlight with lag', () => ordersStatus(url), {
      until: (t) => t.paused && t.inFlight === 5 && t.lag === 15,
      timeoutMs: 60_000,
      check: () => o.proc.exitCode === null || fail(o.tail()),
    });
    expect(st.counts.applied).toBe(5);
    // Every assigned partition counts, those not fetched yet too: the 15 records not taken.
    expect(st.lag).toBe(15);
    await eventually('the 5 applied records to start their runs', () => s.startedIds().length === 5);

    // Signal each run as it starts, until every record's run has ended.
    const signalled = new Set<string>();
    await eventually(
      'every record to start its run, and the run to end',
      async () => {
        const fresh = s.startedIds().filter((r) => !signalled.has(r));
        for (const r of fresh) signalled.add(r);
        await Promise.all(fresh.map((r) => s.signal(r)));
        return s.completedIds().length;
      },
      {
        until: (n) => n === keys.length,
        timeoutMs: 90_000,
        intervalMs: 200,
        check: () => o.proc.exitCode === null || fail(o.tail()),
      },
    );
    // By the engine's clock: never more than maxInFlight runs started and not ended at once.
    expect({ most: mostAtOnce(s), timeline: timeline(s) }).toMatchObject({ most: 5 });
    expect(new Set(s.startedIds()).size).toBe(20);
    expect(distinctEvents(s.h.events).filter((e) => e.event === 'RunStarted')).toHaveLength(20);
  });

  it("redrive: a dead-lettered record goes back through trigger.<name>, not the source, and starts the record's own run once", async () => {
    const s = await stack('trg-redrive');
    let o = await s.start();
    await s.producer.send({
      topic: s.source,
      messages: [{ key: 'r', value: JSON.stringify({ key: 'r', seq: '7' }), partition: 0 }],
    });
    const dlq = `${s.h.prefix}trigger.orders.dlq`;
    const [dead] = await s.h.readRecords(dlq, 1);
    expect(dead.headers['x-dlq-error-code']).toBe('TRIGGER_INPUT_INVALID');

    // The "fix": the orders trigger now repairs a numeric-string seq.
    o.kill('SIGTERM');
    await o.exited;
    o = await s.start({ TRIGGER_REPAIR_SEQ: '1' });
    const admin = await s.h.ns.getAdmin();
    const sourceEnds = await admin.fetchTopicOffsets(s.source);

    const cli = await keyflowCli(['dlq', 'redrive', 'trigger.orders.dlq', '--json'], s.h.env());
    expect(cli.err).toBe('');
    expect(cli.json()).toMatchObject({ refused: 0, refusals: [] });
    expect(cli.code).toBe(0);

    const runId = `orders:${s.source}:0:0`;
    await s.started([runId], o);
    await s.signal(runId);
    await eventually('the redriven run to complete', () => s.completedIds().includes(runId));
    const triggerEnds = await admin.fetchTopicOffsets(`${s.h.prefix}trigger.orders`);
    expect(triggerEnds.reduce((n, e) => n + Number(e.high), 0)).toBe(1);
    expect(await admin.fetchTopicOffsets(s.source)).toEqual(sourceEnds);
    expect(s.startedIds()).toEqual([runId]);
    expect(distinctEvents(s.h.events).filter((e) => e.event === 'RunStarted')).toHaveLength(1);
  });

  it('signal by business key: reaches the running run of that key; none running -> TRIGGER_NO_SUCH_RUN after awaitRunMs', async () => {
    const s = await stack('trg-bkey');
    const o = await s.start({ TRIGGER_AWAIT_RUN_MS: '1500' });
    await s.producer.send({
      topic: s.source,
      messages: [{ key: 'bk-1', value: JSON.stringify({ key: 'bk-1', seq: 0 }) }],
    });
    const runs = await s.started(['orders:'], o, true);
    const runId = runs[0];
    await s.producer.send({
      topic: s.signals,
      messages: [{ key: 'bk-1', value: JSON.stringify({ businessKey: 'bk-1' }) }],
    });
    await eventually('the run of business key bk-1 to complete', () => s.completedIds().includes(runId));

    // No running run has business key `nobody`; bk-1's run has ended.
    await s.producer.send({
      topic: s.signals,
      messages: [
        { key: 'x', value: JSON.stringify({ businessKey: 'nobody' }) },
        { key: 'x', value: JSON.stringify({ businessKey: 'bk-1' }) },
      ],
    });
    const dead = await s.h.readRecords(`${s.h.prefix}trigger.goes.dlq`, 2);
    for (const d of dead) {
      expect(d.headers['x-dlq-error-code']).toBe('TRIGGER_NO_SUCH_RUN');
      const waited =
        Number(d.headers['x-dlq-first-failure-at']) - Number(d.headers['x-keyflow-trigger-source-timestamp']);
      expect(waited).toBeGreaterThanOrEqual(1_500);
    }
    expect(s.completedIds()).toEqual([runId]);
  });

  it('a missing source topic: ready and degraded (TRIGGER_SOURCE_MISSING); once created its records start runs and the condition clears', async () => {
    const s = await stack('trg-missing', false);
    const o = await s.start();
    const url = await o.ready;
    const h = await degradedWith(url, 'TRIGGER_SOURCE_MISSING');
    expect(h.body.degraded.filter((d) => d.code === 'TRIGGER_SOURCE_MISSING').map((d) => d.id)).toEqual([
      'trigger:orders',
    ]);

    await s.h.ns.createTopics({ name: 'src-orders', numPartitions: 2 });
    await s.producer.send({
      topic: s.source,
      messages: [{ key: 'late', value: JSON.stringify({ key: 'late', seq: 0 }) }],
    });
    await s.started(['orders:'], o, true);
    await eventually('the trigger condition to clear', () => healthOf(url), {
      until: (a) => !a.body.degraded?.some((d) => d.id === 'trigger:orders'),
      timeoutMs: 30_000,
    });
  });
});

interface Stack {
  h: OrchestratorHarness;
  source: string;
  signals: string;
  producer: Producer;
  start(extra?: Record<string, string>): Promise<ServiceProcess>;
  /** Run ids of the distinct RunStarted events so far. */
  startedIds(): string[];
  completedIds(): string[];
  /** The engine's occurredAt of a run's event (ms), undefined when not seen. */
  at(event: string, runId: string): number | undefined;
  /** Waits until runs with these ids (or, with `prefix`, one run whose id starts with each) started. */
  started(ids: string[], o: ServiceProcess, prefix?: boolean): Promise<string[]>;
  /** Waits until the events reader has seen the run's RunCompleted. */
  ended(runId: string): Promise<unknown>;
  /** Signals `go` to a run by id through the signal topic. */
  signal(runId: string): Promise<void>;
  close(): Promise<void>;
}

async function newStack(name: string, createSource: boolean): Promise<Stack> {
  const h = new OrchestratorHarness(name);
  const source = `${h.prefix}src-orders`;
  const signals = `${h.prefix}src-goes`;
  // The harness's createTopics rides out lagging metadata (the admin's waitForLeaders can fail on it).
  await h.ns.createTopics(...(createSource ? [{ name: 'src-orders', numPartitions: 3 }] : []), {
    name: 'src-goes',
    numPartitions: 2,
  });
  const producer = h.ns.kafka.producer();
  await producer.connect();
  let reading = false;
  const ids = (event: string) =>
    distinctEvents(h.events)
      .filter((e: Lifecycle) => e.event === event)
      .map((e) => e.value.runId);
  return {
    h,
    source,
    signals,
    producer,
    start: async (extra = {}) => {
      const o = await h.startOrchestrator(
        { TRIGGER_SOURCE_TOPIC: source, TRIGGER_SIGNAL_TOPIC: signals, ...extra },
        FIXTURE,
      );
      if (!reading) await h.readEvents(); // wf.events exists once an orchestrator is ready
      reading = true;
      return o;
    },
    startedIds: () => ids('RunStarted'),
    completedIds: () => ids('RunCompleted'),
    at: (event, runId) => {
      const e = distinctEvents(h.events).find((x) => x.event === event && x.value.runId === runId);
      return e && Number((e.value.metadata as unknown as { occurredAt: number }).occurredAt);
    },
    started: (want, o, prefix = false) =>
      eventually(
        `runs ${want.join(', ')} to start`,
        () => {
          const got = ids('RunStarted');
          return want.map((w) => got.find((g) => (prefix ? g.startsWith(w) : g === w)));
        },
        {
          until: (found) => found.every((f) => f !== undefined),
          timeoutMs: 60_000,
          check: () => o.proc.exitCode === null || fail(o.tail()),
        },
      ) as Promise<string[]>,
    ended: (runId) =>
      eventually(`run ${runId} to complete`, () => ids('RunCompleted').includes(runId), {
        timeoutMs: 60_000,
      }),
    signal: async (runId) => {
      await producer.send({ topic: signals, messages: [{ key: runId, value: JSON.stringify({ runId }) }] });
    },
    close: async () => {
      await producer.disconnect().catch(() => undefined);
      await h.teardown();
    },
  };
}

/** The most runs started and not completed at one time, by the engine's event times (occurredAt, ms). */
function mostAtOnce(s: Stack): number {
  const steps = s
    .startedIds()
    .flatMap((r) => [
      { at: s.at('RunStarted', r)!, d: 1 },
      { at: s.at('RunCompleted', r) ?? Infinity, d: -1 },
    ])
    .sort((a, b) => a.at - b.at || a.d - b.d); // an end before a start at the same ms
  let now = 0;
  let most = 0;
  for (const x of steps) most = Math.max(most, (now += x.d));
  return most;
}

/** Each run's start and end (engine time, ms), by start: what a failed maxInFlight check shows. */
const timeline = (s: Stack) =>
  s
    .startedIds()
    .map((r) => `${s.at('RunStarted', r)}-${s.at('RunCompleted', r)} ${r}`)
    .sort();

/** The `orders` trigger as GET /ops/triggers shows it (the tests reach the API on loopback without a key). */
async function ordersStatus(url: string) {
  const r = await fetch(`${url}/ops/triggers`);
  const body = (await r.json()) as {
    triggers: Array<{
      name: string;
      paused: boolean;
      inFlight: number;
      lag: number;
      counts: { applied: number };
    }>;
  };
  const t = body.triggers.find((x) => x.name === 'orders');
  if (!t) throw new Error(`no orders trigger in ${JSON.stringify(body)}`);
  return t;
}
