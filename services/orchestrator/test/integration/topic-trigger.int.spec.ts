import { eventually } from '@keyflow/testing';
import type { Producer } from '@keyflow/kafka';
import { distinctEvents, OrchestratorHarness, type Lifecycle } from './support';

jest.setTimeout(240_000);

const FIXTURE = 'services/orchestrator/test/fixtures/trigger-orchestrator.ts';
const KEYS = 6;
const PER_KEY = 10;

/**
 * Topic triggers (issue "Start and signal runs from the topics a team already has"): records of a topic keyflow did
 * not create start one run each, a key's runs in offset order; bad records go to the trigger's DLQ with triage
 * headers and stop nothing; a signal trigger signals the run a record names; a restart and a group reset to earliest
 * start nothing twice.
 */
describe('topic triggers', () => {
  const h = new OrchestratorHarness('trigger');
  const source = `${h.prefix}src-orders`;
  const signals = `${h.prefix}src-goes`;
  let producer: Producer;
  const env = () => ({ TRIGGER_SOURCE_TOPIC: source, TRIGGER_SIGNAL_TOPIC: signals });

  beforeAll(async () => {
    const admin = await h.ns.getAdmin();
    await admin.createTopics({
      topics: [
        { topic: source, numPartitions: 3, replicationFactor: 1 },
        { topic: signals, numPartitions: 2, replicationFactor: 1 },
      ],
      waitForLeaders: true,
    });
    producer = h.ns.kafka.producer();
    await producer.connect();
  });
  afterAll(async () => {
    await producer?.disconnect();
    await h.teardown();
  }, 60_000);

  const started = () =>
    distinctEvents(h.events).filter((e) => e.event === 'RunStarted' && e.value.runId.startsWith('orders:'));

  it('each record starts one run, a key runs in offset order, bad records go to the DLQ, signals reach their run', async () => {
    const orchestrator = await h.startOrchestrator(env(), FIXTURE);
    await h.readEvents();
    const messages = [];
    for (let seq = 0; seq < PER_KEY; seq++)
      for (let k = 0; k < KEYS; k++)
        messages.push({ key: `order-${k}`, value: JSON.stringify({ key: `order-${k}`, seq }) });
    await producer.send({ topic: source, messages: messages.slice(0, 30) });
    await producer.send({
      topic: source,
      messages: [
        { key: 'order-0', value: '{not json' },
        { key: 'order-1', value: JSON.stringify({ key: 'order-1', seq: 'one' }) },
      ],
    });
    await producer.send({ topic: source, messages: messages.slice(30) });

    const runs = await eventually('every record to start its run', started, {
      until: (r) => r.length >= KEYS * PER_KEY,
      timeoutMs: 120_000,
      check: () => orchestrator.proc.exitCode === null || fail(orchestrator.tail()),
    });
    expect(runs).toHaveLength(KEYS * PER_KEY);
    expectKeyOrder(runs);

    const dlq = await h.readRecords(`${h.prefix}trigger.orders.dlq`, 2);
    expect(dlq.map((m) => m.headers['x-dlq-error-code']).sort()).toEqual([
      'TRIGGER_INPUT_INVALID',
      'TRIGGER_RECORD_UNDECODABLE',
    ]);
    // A redrive sends to the trigger's own topic; the source topic is named by the trigger's own headers.
    expect(dlq.every((m) => m.headers['x-dlq-original-topic'] === `${h.prefix}trigger.orders`)).toBe(true);
    expect(dlq.every((m) => m.headers['x-keyflow-trigger-source-topic'] === source)).toBe(true);

    // A signal by run id completes that run; one for a run that does not exist goes to the signal trigger's DLQ.
    const target = runs[0].value.runId;
    await producer.send({
      topic: signals,
      messages: [
        { key: 'a', value: JSON.stringify({ runId: target }) },
        { key: 'b', value: JSON.stringify({ runId: 'orders:no-such-run' }) },
      ],
    });
    await eventually('the signalled run to complete', () =>
      distinctEvents(h.events).some((e) => e.event === 'RunCompleted' && e.value.runId === target),
    );
    const noRun = await h.readRecords(`${h.prefix}trigger.goes.dlq`, 1);
    expect(noRun[0].headers['x-dlq-error-code']).toBe('TRIGGER_NO_SUCH_RUN');

    // A restart, then the group reset to the earliest offset: nothing starts twice.
    orchestrator.kill('SIGKILL');
    await orchestrator.exited;
    const admin = await h.ns.getAdmin();
    // The killed member leaves the group at its session timeout; a reset is refused until then.
    await eventually(
      'the trigger group reset to earliest',
      () =>
        admin
          .resetOffsets({ groupId: `${h.prefix}keyflow-trigger-orders`, topic: source, earliest: true })
          .then(() => true)
          .catch(() => false),
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    const again = await h.startOrchestrator(env(), FIXTURE);
    await producer.send({
      topic: source,
      messages: [{ key: 'order-9', value: JSON.stringify({ key: 'order-9', seq: 0 }) }],
    });
    await eventually(
      'the record after the reset to start its run',
      () => started().length === KEYS * PER_KEY + 1,
      {
        timeoutMs: 60_000,
        check: () => again.proc.exitCode === null || fail(again.tail()),
      },
    );
    const perRun = new Map<string, number>();
    for (const e of started()) perRun.set(e.value.runId, (perRun.get(e.value.runId) ?? 0) + 1);
    expect([...perRun.values()].every((n) => n === 1)).toBe(true);
  });
});

/** Each key's runs started in the order of their records' `seq` (the run input), by the engine's start times. */
function expectKeyOrder(runs: Lifecycle[]): void {
  const byKey = new Map<string, Array<{ seq: number; at: number }>>();
  for (const e of runs) {
    const input = JSON.parse(e.value.input as string) as { key: string; seq: number };
    const at = Number((e.value.metadata as unknown as { occurredAt: number }).occurredAt);
    const list = byKey.get(input.key) ?? [];
    list.push({ seq: input.seq, at });
    byKey.set(input.key, list);
  }
  for (const [key, list] of byKey) {
    const bySeq = [...list].sort((a, b) => a.seq - b.seq);
    for (let i = 1; i < bySeq.length; i++)
      if (bySeq[i].at < bySeq[i - 1].at)
        throw new Error(`${key}: run of seq ${bySeq[i].seq} started before seq ${bySeq[i - 1].seq}`);
  }
}
