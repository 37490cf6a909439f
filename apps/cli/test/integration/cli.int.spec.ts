import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { dlqMessage } from '@keyflow/kafka';
import { eventually, TestNamespace } from '@keyflow/testing';
import { OrchestratorHarness } from '@keyflow/orchestrator/test/integration/support';

jest.setTimeout(180_000);

const ROOT = join(__dirname, '../../../..');
/** A command's --json output: its shape is what the matchers below check. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

/** Runs `keyflow <args>` as an operator does (the workspace's bin), with the stack's environment plus `env`. */
function keyflow(args: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, [join(ROOT, 'apps/cli/bin/keyflow.js'), ...args], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  return new Promise<{ code: number | null; out: string; err: string; json: () => Json }>((resolve) =>
    child.once('exit', (code) => resolve({ code, out, err, json: () => JSON.parse(out) })),
  );
}

describe('the keyflow CLI', () => {
  const h = new OrchestratorHarness('cli');
  afterAll(() => h.teardown());

  it('runs start, show and ls drive and read a real orchestrator; a missing run exits 1 with the API answer', async () => {
    const orch = await h.startOrchestrator();
    await h.startWorker();
    const env = { ...h.env(), KEYFLOW_API_URL: await orch.ready };
    const started = await keyflow(['runs', 'start', 'three-step', '--input', '{"n":7}', '--json'], env);
    expect(started.code).toBe(0);
    const { runId } = started.json();
    const done = await eventually(
      'the run completed',
      async () => {
        const r = await keyflow(['runs', 'show', runId, '--json'], env);
        return r.code === 0 && r.json().status === 'completed' ? r.json() : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    expect(done.steps.third.status).toBe('completed');
    const human = await keyflow(['runs', 'show', runId], env);
    expect(human.out).toMatch(new RegExp(`run ${runId}\\s+three-step v1\\s+completed`));
    expect(human.out).toMatch(/^second\s+completed\s+1\s/m);
    expect(human.out).toMatch(/timeline:[\s\S]*RunCompleted/);
    const listed = await keyflow(
      ['runs', 'ls', '--workflow', 'three-step', '--status', 'completed', '--json'],
      env,
    );
    expect(listed.json().runs.map((r: { runId: string }) => r.runId)).toContain(runId);
    const missing = await keyflow(['runs', 'show', 'no-such-run'], env);
    expect(missing.code).toBe(1);
    expect(missing.err).toMatch(/HTTP 404/);

    // The engine's group, caught up on topics it reads in transactions: no lag, though the log ends past its offsets.
    const lag = await keyflow(['groups', 'lag', h.ns.groupId('orchestrator'), '--all', '--json'], env);
    expect(lag.code).toBe(0);
    const rows = lag.json() as Array<{ topic: string; lag: number; exact: boolean }>;
    expect(rows.map((r) => r.topic)).toEqual(expect.arrayContaining(['wf.requests', 'task.results']));
    expect(rows.every((r) => r.lag === 0 && r.exact)).toBe(true);
  });

  it('dlq ls, show, redrive --dry-run and redrive on a DLQ written in transactions (committed and aborted)', async () => {
    const ns = new TestNamespace('cli-dlq');
    try {
      const [original, dlq] = await ns.createTopics(
        { name: 'orig', numPartitions: 1 },
        { name: 'orig.dlq', numPartitions: 1 },
      );
      const writer = ns.kafka.producer({
        transactionalId: `${ns.prefix}-w`,
        idempotent: true,
        maxInFlightRequests: 1,
      });
      await writer.connect();
      const msg = (v: string, errorClass: string) =>
        dlqMessage(
          {
            topic: original,
            partition: 0,
            offset: '0',
            key: Buffer.from(v),
            value: Buffer.from(v),
            headers: {},
          },
          {
            errorClass,
            errorMessage: `bad ${v}`,
            attempts: 3,
            firstFailureAt: 1,
            lastFailureAt: 2,
            consumerGroup: 'g',
          },
        );
      for (const [values, end] of [
        [['c1', 'c2'], 'commit'],
        [['a1'], 'abort'],
        [['c3'], 'commit'],
      ] as const) {
        const tx = await writer.transaction();
        await tx.send({
          topic: dlq,
          messages: values.map((v) => msg(v, v === 'c3' ? 'Other' : 'TaskInputError')),
        });
        await tx[end]();
      }
      await writer.disconnect();
      const env = { KAFKA_BROKERS: ns.infra.kafkaBrokers.join(','), KEYFLOW_TOPIC_PREFIX: `${ns.prefix}.` };

      const ls = await keyflow(['dlq', 'ls', '--json'], env);
      expect(ls.code).toBe(0);
      expect(ls.json()).toEqual([
        expect.objectContaining({
          topic: 'orig.dlq',
          records: 2 + 1,
          topErrors: [
            { errorClass: 'TaskInputError', count: 2 },
            { errorClass: 'Other', count: 1 },
          ],
        }),
      ]);
      const show = await keyflow(
        ['dlq', 'show', 'orig.dlq', '--error-class', 'TaskInputError', '--json'],
        env,
      );
      expect(show.json()).toEqual([
        expect.objectContaining({
          key: 'c1',
          errorClass: 'TaskInputError',
          attempts: 3,
          originalTopic: original,
          value: { undecodable: expect.stringMatching(/no registered schema/), text: 'c1' },
        }),
        expect.objectContaining({ key: 'c2', errorMessage: 'bad c2' }),
      ]);
      const dry = await keyflow(
        ['dlq', 'redrive', 'orig.dlq', '--error-class', 'TaskInputError', '--dry-run', '--json'],
        env,
      );
      expect(dry.json()).toMatchObject({ scanned: 3, moved: 2, skipped: 1, dryRun: true });
      const real = await keyflow(
        ['dlq', 'redrive', 'orig.dlq', '--error-class', 'TaskInputError', '--json'],
        env,
      );
      expect(real.json()).toMatchObject({ moved: 2, dryRun: false, byTopic: { [original]: 2 } });
      // What landed on the original topic: the two records, nothing from the dry run or the aborted transaction.
      const lag = await keyflow(['groups', 'lag', ns.groupId('nobody')], env);
      expect(lag.code).toBe(0);
      const admin = ns.kafka.admin();
      await admin.connect();
      const [end] = await admin.fetchTopicOffsets(original);
      await admin.disconnect();
      expect(end.high).toBe('2');
    } finally {
      await ns.cleanup();
    }
  });
});
