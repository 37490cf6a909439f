import { randomBytes } from 'node:crypto';
import { Partitioners, type KafkaMessage } from '@keyflow/kafka';
import { KAFKA_DEFAULT_MAX_MESSAGE_BYTES } from '@keyflow/blobs';
import { newMetadata } from '@keyflow/contracts';
import { NODE_HAS_ZSTD } from '@keyflow/kafka';
import { DLQ_HEADERS, header } from '@keyflow/ops';
import type { RunSnapshot } from '@keyflow/schemas';
import {
  Collector,
  degradedWith,
  eventually,
  kcatMissing,
  longRangeRepeats,
  produceLargeWithKcat,
  produceWithKcat,
} from '@keyflow/testing';
import { OrchestratorHarness, post } from './support';

jest.setTimeout(90_000);

/**
 * The engine's inputs (wf.requests, task.results) and the read model's input (wf.state) written by a librdkafka
 * producer (kcat) with zstd, as a Java or Go client with compression.type=zstd writes them: kafkajs alone cannot
 * read zstd (KIP-110) and its consumer crashed.
 */
describe('the orchestrator reading zstd-compressed records', () => {
  const h = new OrchestratorHarness('orch-zstd');
  let noKcat: string | undefined;
  let url: string;
  const zstd = (topic: string, key: string, value: Buffer) =>
    produceWithKcat({ brokers: h.ns.infra.kafkaBrokers, topic, codec: 'zstd', records: [{ key, value }] });
  beforeAll(async () => {
    noKcat = await kcatMissing();
    url = await (await h.startOrchestrator()).ready;
    await h.readEvents();
    await h.codec.registerTopics(['wf.requests', 'wf.state']);
  });
  afterAll(() => h.teardown());

  /**
   * Runs `runId` three-step to completion (an echo worker answering), then reads wf.requests.dlq in group `group`
   * until `count` records of that key are there.
   */
  const runThenDlqRecords = async (runId: string, group: string, count: number) => {
    await h.simulateWorker(['echo'], (cmd) => ({ output: { echoed: cmd.stepId } }));
    expect((await post(`${url}/runs`, { workflow: 'three-step', input: {}, runId })).status).toBe(202);
    await eventually('RunCompleted', () => h.of(runId).some((e) => e.event === 'RunCompleted'));
    const dlq = new Collector<KafkaMessage>();
    const reader = h.ns.kafka.consumer({ groupId: h.ns.groupId(group) });
    await reader.connect();
    await reader.subscribe({ topic: `${h.codec.physical('wf.requests')}.dlq`, fromBeginning: true });
    await reader.run({ eachMessage: async ({ message }) => void dlq.push(message) });
    return eventually(
      'the DLQ records of the run key',
      () => dlq.items.filter((r) => r.key?.toString() === runId),
      { until: (rs) => rs.length >= count, timeoutMs: 60_000 },
    ).finally(() => reader.disconnect());
  };

  it('a zstd StartRun on wf.requests and zstd TaskCompleted results run three-step to completion, and a zstd wf.state snapshot is served by the read model', async () => {
    if (noKcat) return console.warn(`skipped: ${noKcat}`);
    await h.simulateWorker(['echo'], (cmd) => ({ output: { echoed: cmd.stepId } }), { publish: zstd });
    const runId = `zstd-run-${h.ns.prefix}`;
    await zstd(h.codec.physical('wf.requests'), runId, h.startRunValue(runId));
    await eventually('RunCompleted', () => h.of(runId).some((e) => e.event === 'RunCompleted'));
    expect(
      h
        .of(runId)
        .filter((e) => e.event === 'StepCompleted')
        .map((e) => e.value.stepId),
    ).toEqual(['first', 'second', 'third']);

    // The read model: a snapshot of another run, copied from the engine's own and written with zstd.
    const snapshots = new Collector<RunSnapshot>();
    const reader = h.ns.kafka.consumer({ groupId: h.ns.groupId('state-reader'), maxWaitTimeInMs: 100 });
    await reader.connect();
    await reader.subscribe({ topic: h.codec.physical('wf.state'), fromBeginning: true });
    await reader.run({
      eachMessage: async ({ topic, partition, message }) => {
        if (message.key?.toString() !== runId || !message.value) return;
        const d = await h.codec.decode('wf.state', message.value, {
          topic,
          partition,
          offset: message.offset,
        });
        if (d.event === 'RunSnapshot' && d.value.status === 'completed') snapshots.push(d.value);
      },
    });
    const [original] = await snapshots.wait(1, 30_000);
    await reader.disconnect();
    const copyId = `${runId}-copy`;
    await zstd(
      h.codec.physical('wf.state'),
      copyId,
      h.codec.encode('wf.state', 'RunSnapshot', {
        ...original,
        metadata: newMetadata('RunSnapshot', { key: copyId, correlationId: copyId }),
        runId: copyId,
        state: JSON.stringify({ ...JSON.parse(original.state), runId: copyId }),
      }),
    );
    const served = await eventually(`GET /runs/${copyId}`, async () => {
      const res = await fetch(`${url}/runs/${copyId}`);
      return res.status === 200 ? ((await res.json()) as { runId: string; status: string }) : undefined;
    });
    expect(served).toMatchObject({ runId: copyId, status: 'completed' });
    expect(h.processes.every((p) => p.proc.exitCode === null)).toBe(true);
    // The service still takes new runs through its own (kafkajs) producer.
    expect((await post(`${url}/runs`, { workflow: 'three-step', input: {} })).status).toBe(202);
  });
  it('requests it cannot decode, near max.message.bytes or far past it before compression, go to wf.requests.dlq whole; the run key goes on', async () => {
    if (noKcat) return console.warn(`skipped: ${noKcat}`);
    const topic = h.codec.physical('wf.requests');
    const runId = `huge-${h.ns.prefix}`;
    // Random bytes up to 400 bytes short of the topic's limit (no codec shrinks them: with the triage headers the
    // DLQ record is larger than the source topic accepts), and 3 MB that only zstd makes small enough.
    const near = randomBytes(KAFKA_DEFAULT_MAX_MESSAGE_BYTES - 400);
    near[0] = 0xff; // not the wire format's magic byte
    const far = Buffer.alloc(3 * 1024 * 1024, 'not avro ');
    // 6 MB that zstd brings to ~300 KB while gzip leaves it at 6 MB: over the DLQ's limit unless its record is zstd.
    const beyondGzip = longRangeRepeats(300 * 1024, 20);
    const sent = [near, far, beyondGzip];
    for (const value of sent)
      await produceWithKcat({
        brokers: h.ns.infra.kafkaBrokers,
        topic,
        codec: 'zstd',
        records: [{ key: runId, value }],
        config: { 'message.max.bytes': String(8 * 1024 * 1024) },
      });
    const records = await runThenDlqRecords(runId, 'dlq-huge', sent.length);
    for (const value of sent) expect(records.some((r) => r.value!.equals(value))).toBe(true);
    expect(new Set(records.map((r) => header(r.headers, DLQ_HEADERS.originalTopic)))).toEqual(
      new Set([topic]),
    );
    expect(h.processes.every((p) => p.proc.exitCode === null)).toBe(true);
  });

  it('requests that decompress past what one request may carry go to wf.requests.dlq, whole when a codec brings them under, else as a stand-in; the run key goes on', async () => {
    if (noKcat) return console.warn(`skipped: ${noKcat}`);
    const topic = h.codec.physical('wf.requests');
    const runId = `bomb-${h.ns.prefix}`;
    // 110 MiB each, over the broker's socket.request.max.bytes: a 9-byte pattern gzip brings to ~110 KB, and a
    // 300 KiB block repeated that only zstd shrinks, which the WebAssembly zstd build here (at most 64 MiB) cannot.
    const gzipable = Buffer.alloc(110 * 1024 * 1024, 'not avro ');
    const noCodec = longRangeRepeats(300 * 1024, 375);
    for (const value of [gzipable, noCodec])
      await produceLargeWithKcat({
        brokers: h.ns.infra.kafkaBrokers,
        topic,
        codec: 'zstd',
        key: runId,
        value,
        config: { 'message.max.bytes': String(200 * 1024 * 1024) },
      });
    const records = await runThenDlqRecords(runId, 'dlq-bomb', 2);
    expect(records.some((r) => r.value?.equals(gzipable))).toBe(true);
    if (NODE_HAS_ZSTD) {
      // node:zlib's zstd takes any size: the second one goes whole too.
      expect(records.some((r) => r.value?.equals(noCodec))).toBe(true);
    } else {
      const standIn = records.find((r) => r.value === null);
      expect(header(standIn?.headers, DLQ_HEADERS.omitted)).toContain(`value of ${noCodec.length} bytes`);
      expect(header(standIn?.headers, DLQ_HEADERS.originalTopic)).toBe(topic);
    }
    expect(h.processes.every((p) => p.proc.exitCode === null)).toBe(true);
  }, 180_000);
});

describe('the orchestrator meeting an input batch it cannot decode', () => {
  const h = new OrchestratorHarness('orch-undecodable');
  afterAll(() => h.teardown());

  it('pauses only that wf.requests partition, names it in /health and /metrics, runs every other partition, and never exits', async () => {
    const missing = await kcatMissing();
    if (missing) return console.warn(`skipped: ${missing}`);
    const orch = await h.startOrchestrator({ TEST_REJECT_LZ4: '1', KEYFLOW_FATAL_EXIT_DELAY_MS: '1000' });
    const url = await orch.ready;
    await h.readEvents();
    await h.codec.registerTopics(['wf.requests']);
    await h.simulateWorker(['echo'], (cmd) => ({ output: { echoed: cmd.stepId } }));
    const topic = h.codec.physical('wf.requests');
    const partitions = Number(h.env().ORCHESTRATOR_PARTITIONS);
    // Where the project's producers (and kcat's murmur2) put a run's records.
    const partitionOf = (key: string) =>
      Partitioners.DefaultPartitioner()({
        topic,
        partitionMetadata: Array.from({ length: partitions }, (_, i) => ({
          partitionId: i,
          leader: 0,
          partitionErrorCode: 0,
          replicas: [0],
          isr: [0],
        })),
        message: { key, value: null },
      });
    const blocked = `undecodable-${h.ns.prefix}`;
    await produceWithKcat({
      brokers: h.ns.infra.kafkaBrokers,
      topic,
      codec: 'lz4',
      records: [
        {
          key: blocked,
          value: h.startRunValue(blocked),
        },
      ],
    });
    const health = await degradedWith(url, 'UNDECODABLE_BATCH');
    expect(health.status).toBe(200);
    expect(health.body.status).toBe('degraded');
    const pa = partitionOf(blocked);
    expect(health.body.degraded).toEqual([
      expect.objectContaining({
        code: 'UNDECODABLE_BATCH',
        error: expect.stringContaining(`${topic}:${pa} `),
      }),
    ]);
    // Runs started after it: those on other partitions complete; those behind it on its partition wait (order).
    const runs = Array.from({ length: 8 }, (_, i) => `after-${i}-${h.ns.prefix}`);
    for (const runId of runs)
      expect((await post(`${url}/runs`, { workflow: 'three-step', input: {}, runId })).status).toBe(202);
    const elsewhere = runs.filter((r) => partitionOf(r) !== pa);
    const behind = runs.filter((r) => partitionOf(r) === pa);
    expect(elsewhere.length).toBeGreaterThan(0);
    for (const runId of elsewhere)
      await eventually(`RunCompleted ${runId}`, () => h.of(runId).some((e) => e.event === 'RunCompleted'));
    for (const runId of [blocked, ...behind]) expect(h.of(runId)).toEqual([]);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(
      new RegExp(
        `keyflow_undecodable_batches_total\\{[^}]*topic="${topic}"[^}]*partition="${pa}"[^}]*\\} [1-9]`,
      ),
    );
    expect(orch.proc.exitCode).toBeNull();
  });
});
