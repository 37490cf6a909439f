import type { TaskCompleted } from '@keyflow/schemas';
import {
  KCAT_CODECS,
  degradedWith,
  eventually,
  kcatMissing,
  produceLargeWithKcat,
  produceWithKcat,
} from '@keyflow/testing';
import { MAX_DECOMPRESSED_BYTES_SETTING } from '@keyflow/kafka';
import { WorkerHarness } from './support';
import { taskTopic } from '@keyflow/schemas';

jest.setTimeout(60_000);

/**
 * Task commands written by a librdkafka producer (kcat) with compression.type set, as a Java, Go or librdkafka
 * client would write them: kafkajs alone reads only gzip, and a snappy, lz4 or zstd batch crashed the worker.
 */
describe('a worker reading compressed task commands', () => {
  const h = new WorkerHarness('compressed');
  let noKcat: string | undefined;
  beforeAll(async () => {
    noKcat = await kcatMissing();
    await h.setup(['seq']);
    await h.startWorker();
  });
  afterAll(() => h.teardown());

  it.each(KCAT_CODECS)('a %s-compressed command from a librdkafka producer is executed', async (codec) => {
    if (noKcat) return console.warn(`skipped: ${noKcat}`);
    const commands = [1, 2, 3].map((seq) =>
      h.command('seq', `${codec}-${seq}`, { entity: `${codec}-${seq}`, seq }),
    );
    await produceWithKcat({
      brokers: h.ns.infra.kafkaBrokers,
      topic: h.codec.physical(taskTopic('seq')),
      codec,
      records: commands.map((c) => ({
        key: c.metadata.key,
        value: h.codec.encode(taskTopic('seq'), 'TaskCommand', c),
      })),
    });

    for (const c of commands) {
      const r = await eventually(`TaskCompleted for ${c.idempotencyKey}`, () =>
        h.results.items.find((x) => x.value.idempotencyKey === c.idempotencyKey),
      );
      expect(r!.event).toBe('TaskCompleted');
      expect(JSON.parse((r!.value as TaskCompleted).output)).toEqual(JSON.parse(c.input));
    }
    for (const w of h.workers) expect(w.proc.exitCode).toBeNull();
  });
});

describe('a worker meeting a batch it cannot decode', () => {
  const h = new WorkerHarness('undecodable');
  beforeAll(() => h.setup(['seq'], 2));
  afterAll(() => h.teardown());

  it('pauses only that partition, names it in /health and /metrics, keeps working the others, and never exits', async () => {
    const missing = await kcatMissing();
    if (missing) return console.warn(`skipped: ${missing}`);
    const w = await h.startWorker({ TEST_REJECT_LZ4: '1', KEYFLOW_FATAL_EXIT_DELAY_MS: '1000' });
    const url = await w.ready;
    const topic = h.codec.physical(taskTopic('seq'));
    const bad = h.command('seq', 'lz4-undecodable', { entity: 'lz4-undecodable', seq: 1 });
    const after = h.command('seq', 'after-undecodable', { entity: 'after-undecodable', seq: 2 });
    const other = h.command('seq', 'other-partition', { entity: 'other-partition', seq: 3 });
    const rec = (c: typeof bad) => ({
      key: c.metadata.key,
      value: h.codec.encode(taskTopic('seq'), 'TaskCommand', c),
    });
    const brokers = h.ns.infra.kafkaBrokers;
    await produceWithKcat({ brokers, topic, codec: 'lz4', partition: 0, records: [rec(bad)] });
    await produceWithKcat({ brokers, topic, codec: 'gzip', partition: 0, records: [rec(after)] });
    await produceWithKcat({ brokers, topic, codec: 'gzip', partition: 1, records: [rec(other)] });

    // The other partition flows.
    await eventually('the command on the other partition completes', () =>
      h.results.items.find((x) => x.value.idempotencyKey === other.idempotencyKey),
    );
    const health = await degradedWith(url, 'UNDECODABLE_BATCH');
    expect(health.status).toBe(200);
    expect(health.body.status).toBe('degraded');
    expect(health.body.degraded).toEqual([
      expect.objectContaining({
        code: 'UNDECODABLE_BATCH',
        error: expect.stringMatching(new RegExp(`${topic}:0 .*offsets 0\\.\\.0`)),
      }),
    ]);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(
      new RegExp(`keyflow_undecodable_batches_total\\{[^}]*topic="${topic}"[^}]*partition="0"[^}]*\\} [1-9]`),
    );
    expect(metrics).toMatch(new RegExp(`keyflow_quarantined_partitions\\{[^}]*\\} 1`));
    // Nothing behind the bad batch on its partition ran (order), and the process is alive.
    const ran = h.results.items.map((x) => x.value.idempotencyKey);
    expect(ran).not.toContain(bad.idempotencyKey);
    expect(ran).not.toContain(after.idempotencyKey);
    expect(w.proc.exitCode).toBeNull();
  });
});

describe('a worker meeting a compression bomb (a batch that decompresses past KEYFLOW_MAX_DECOMPRESSED_BYTES)', () => {
  const h = new WorkerHarness('bomb');
  beforeAll(() => h.setup(['seq'], 2));
  afterAll(() => h.teardown());

  it('pauses only its partition, names the limit in /health, never exits, and reads it in order once the limit is raised', async () => {
    const missing = await kcatMissing();
    if (missing) return console.warn(`skipped: ${missing}`);
    const limit = 1024 * 1024;
    const w = await h.startWorker({ [MAX_DECOMPRESSED_BYTES_SETTING]: String(limit) });
    const url = await w.ready;
    const topic = h.codec.physical(taskTopic('seq'));
    const brokers = h.ns.infra.kafkaBrokers;
    // 16 MiB of zeros: a few hundred bytes of zstd, within every topic's max.message.bytes.
    await produceLargeWithKcat({
      brokers,
      topic,
      codec: 'zstd',
      partition: 0,
      key: 'bomb',
      value: Buffer.alloc(16 * limit),
      config: { 'message.max.bytes': String(32 * limit) },
    });
    const after = h.command('seq', 'after-bomb', { entity: 'after-bomb', seq: 1 });
    const other = h.command('seq', 'beside-bomb', { entity: 'beside-bomb', seq: 2 });
    const rec = (c: typeof after) => ({
      key: c.metadata.key,
      value: h.codec.encode(taskTopic('seq'), 'TaskCommand', c),
    });
    await produceWithKcat({ brokers, topic, codec: 'gzip', partition: 0, records: [rec(after)] });
    await produceWithKcat({ brokers, topic, codec: 'gzip', partition: 1, records: [rec(other)] });

    await eventually('the command on the other partition completes', () =>
      h.results.items.find((x) => x.value.idempotencyKey === other.idempotencyKey),
    );
    const health = await degradedWith(url, 'UNDECODABLE_BATCH');
    expect(health.body.degraded).toEqual([
      expect.objectContaining({
        code: 'UNDECODABLE_BATCH',
        error: expect.stringMatching(
          new RegExp(`${topic}:0 .*offsets 0\\.\\.0.*${MAX_DECOMPRESSED_BYTES_SETTING} \\(${limit} bytes\\)`),
        ),
      }),
    ]);
    expect(h.results.items.map((x) => x.value.idempotencyKey)).not.toContain(after.idempotencyKey);
    expect(w.proc.exitCode).toBeNull();

    // The operator raises the limit (here: back to the default) and restarts: the batch is read, in order.
    w.kill('SIGTERM');
    await w.exited;
    await h.startWorker();
    await eventually(
      'the command behind the bomb completes',
      () => h.results.items.find((x) => x.value.idempotencyKey === after.idempotencyKey),
      { timeoutMs: 60_000 },
    );
  });
});
