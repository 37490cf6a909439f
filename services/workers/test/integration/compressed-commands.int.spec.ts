import type { TaskCompleted } from '@keyflow/schemas';
import { KCAT_CODECS, ensureKcat, eventually, produceWithKcat } from '@keyflow/testing';
import { WorkerHarness } from './support';

jest.setTimeout(60_000);

/**
 * Task commands written by a librdkafka producer (kcat) with compression.type set, as a Java, Go or librdkafka
 * client would write them: kafkajs alone reads only gzip, and a snappy, lz4 or zstd batch crashed the worker.
 */
describe('a worker reading compressed task commands', () => {
  const h = new WorkerHarness('compressed');
  let kcatMissing: string | undefined;
  beforeAll(async () => {
    kcatMissing = await ensureKcat().then(
      () => undefined,
      (e: Error) => e.message,
    );
    await h.setup(['seq']);
    await h.startWorker();
  });
  afterAll(() => h.teardown());

  it.each(KCAT_CODECS)('a %s-compressed command from a librdkafka producer is executed', async (codec) => {
    if (kcatMissing) return console.warn(`skipped: ${kcatMissing}`);
    const commands = [1, 2, 3].map((seq) =>
      h.command('seq', `${codec}-${seq}`, { entity: `${codec}-${seq}`, seq }),
    );
    await produceWithKcat({
      brokers: h.ns.infra.kafkaBrokers,
      topic: h.codec.physical('task.seq'),
      codec,
      records: commands.map((c) => ({
        key: c.metadata.key,
        value: h.codec.encode('task.seq', 'TaskCommand', c),
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
  beforeAll(() => h.setup(['seq'], 1));
  afterAll(() => h.teardown());

  it('reports UNDECODABLE_BATCH in /health with the offsets, and exits 1 for its supervisor instead of looping', async () => {
    const kcatMissing = await ensureKcat().then(
      () => undefined,
      (e: Error) => e.message,
    );
    if (kcatMissing) return console.warn(`skipped: ${kcatMissing}`);
    const w = await h.startWorker({ TEST_REJECT_LZ4: '1', KEYFLOW_FATAL_EXIT_DELAY_MS: '3000' });
    const url = await w.ready;
    const cmd = h.command('seq', 'lz4-undecodable', { entity: 'lz4-undecodable', seq: 1 });
    await produceWithKcat({
      brokers: h.ns.infra.kafkaBrokers,
      topic: h.codec.physical('task.seq'),
      codec: 'lz4',
      records: [{ key: cmd.metadata.key, value: h.codec.encode('task.seq', 'TaskCommand', cmd) }],
    });
    const health = await eventually(
      '/health 503 naming the undecodable batch',
      async () => {
        const r = await fetch(`${url}/health`);
        return {
          status: r.status,
          body: (await r.json()) as { failed: Array<{ component: string; code: string; error: string }> },
        };
      },
      { until: (x) => x.status === 503 },
    );
    expect(health.body.failed).toEqual([
      expect.objectContaining({ code: 'UNDECODABLE_BATCH', error: expect.stringContaining('offsets 0..0') }),
    ]);
    await expect(w.exited).resolves.toBe(1);
    expect(h.results.items).toEqual([]);
  });
});
