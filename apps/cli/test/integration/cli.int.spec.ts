import { dlqMessage } from '@keyflow/ops';
import { eventually, TestNamespace } from '@keyflow/testing';
import { idempotencyKeyPrefix } from '@keyflow/idempotency';
import {
  keyflowCli as keyflow,
  OrchestratorHarness,
  TERMINAL_EVENTS,
} from '@keyflow/orchestrator/test/integration/support';
import { taskTopic, type TaskTopic } from '@keyflow/schemas';

jest.setTimeout(180_000);

/** A command's --json output: its shape is what the matchers below check. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

describe('the keyflow CLI', () => {
  const h = new OrchestratorHarness('cli');
  afterAll(() => h.teardown());

  it('runs start, show and ls drive and read a real orchestrator; a missing run exits 1 with the API answer', async () => {
    const [orch] = await Promise.all([h.startOrchestrator(), h.startWorker()]);
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
      // task.results.dlq: a DLQ keyflow declares (the tools act on no other), of results (no run to check).
      const [original, dlq] = await ns.createTopics(
        { name: 'task.results', numPartitions: 1 },
        { name: 'task.results.dlq', numPartitions: 1 },
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
          topic: 'task.results.dlq',
          records: 2 + 1,
          topErrors: [
            { errorClass: 'TaskInputError', count: 2 },
            { errorClass: 'Other', count: 1 },
          ],
        }),
      ]);
      const show = await keyflow(
        ['dlq', 'show', 'task.results.dlq', '--error-class', 'TaskInputError', '--json'],
        env,
      );
      expect(show.json()).toEqual([
        expect.objectContaining({
          key: 'c1',
          errorClass: 'TaskInputError',
          attempts: 3,
          originalTopic: original,
          value: { undecodable: expect.any(String), text: 'c1' },
        }),
        expect.objectContaining({ key: 'c2', errorMessage: 'bad c2' }),
      ]);
      const dry = await keyflow(
        ['dlq', 'redrive', 'task.results.dlq', '--error-class', 'TaskInputError', '--dry-run', '--json'],
        env,
      );
      expect(dry.json()).toMatchObject({ scanned: 3, moved: 2, skipped: 1, dryRun: true });
      const real = await keyflow(
        ['dlq', 'redrive', 'task.results.dlq', '--error-class', 'TaskInputError', '--json'],
        env,
      );
      expect(real.json()).toMatchObject({ moved: 2, dryRun: false, byTopic: { [original]: 2 } });
      // The DLQ ledger: the two are handled, so they no longer count as pending and a second redrive skips them.
      const after = await keyflow(['dlq', 'ls', '--json'], env);
      expect(after.json()).toEqual([
        expect.objectContaining({ records: 3, pending: 1, topErrors: [{ errorClass: 'Other', count: 1 }] }),
      ]);
      const again = await keyflow(['dlq', 'redrive', 'task.results.dlq', '--json'], env);
      expect(again.json()).toMatchObject({ moved: 1, alreadyHandled: 2 }); // only c3 was still pending
      const shown = await keyflow(['dlq', 'show', 'task.results.dlq', '--json'], env);
      expect(shown.json().map((r: Json) => [r.key, r.handled?.action, r.handled?.handledBy])).toEqual([
        ['c1', 'REDRIVEN', expect.stringMatching(/^keyflow-cli@/)],
        ['c2', 'REDRIVEN', expect.stringMatching(/^keyflow-cli@/)],
        ['c3', 'REDRIVEN', expect.stringMatching(/^keyflow-cli@/)],
      ]);
      expect((await keyflow(['dlq', 'show', 'task.results.dlq', '--pending', '--json'], env)).json()).toEqual(
        [],
      );
      // In text: who redrove each, and no redrive count for records dead-lettered once (they carry none).
      const text = (await keyflow(['dlq', 'show', 'task.results.dlq', '--key', 'c3'], env)).out;
      expect(text).toMatch(/^ {2}redriven by keyflow-cli@\S+ at /m);
      expect(text).not.toMatch(/redriven 0x|after 0 redrive/);
      // What landed on the original topic: the three records once each, nothing from the dry run, the aborted
      // transaction or the second redrive of the first two.
      const lag = await keyflow(['groups', 'lag', ns.groupId('nobody')], env);
      expect(lag.code).toBe(0);
      const admin = ns.kafka.admin();
      await admin.connect();
      const [end] = await admin.fetchTopicOffsets(original);
      await admin.disconnect();
      expect(end.high).toBe('3');
    } finally {
      await ns.cleanup();
    }
  });

  it("dlq tools see only this deployment's DLQs, redrive only to a DLQ's own source topic, and print no control characters", async () => {
    const ns = new TestNamespace('cli-dlq-own');
    try {
      const [results, resultsDlq, , elsewhere] = await ns.createTopics(
        { name: 'task.results', numPartitions: 1 },
        { name: 'task.results.dlq', numPartitions: 1 },
        { name: 'orders.dlq', numPartitions: 1 }, // another application's DLQ in the same cluster
        { name: 'orders', numPartitions: 1 },
      );
      const env = { KAFKA_BROKERS: ns.infra.kafkaBrokers.join(','), KEYFLOW_TOPIC_PREFIX: `${ns.prefix}.` };
      const dl = {
        errorClass: 'Bad\x1b[31mClass',
        errorMessage: 'boom\x1b]0;pwned\x07\u009b2J',
        attempts: 1,
        firstFailureAt: 1,
        lastFailureAt: 2,
        consumerGroup: 'g',
      };
      const at = (topic: string, key: string) =>
        dlqMessage(
          { topic, partition: 0, offset: '0', key: Buffer.from(key), value: Buffer.from(key), headers: {} },
          dl,
        );
      const p = ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await p.connect();
      await p.send({
        topic: resultsDlq,
        acks: -1,
        messages: [at(results, 'own\x1b[2J'), at(elsewhere, 'foreign')],
      });
      await p.disconnect();

      const ls = await keyflow(['dlq', 'ls', '--json'], env);
      expect(ls.json().map((d: Json) => d.topic)).toEqual(['task.results.dlq']);
      const other = await keyflow(['dlq', 'redrive', 'orders.dlq', '--json'], env);
      expect([other.code, other.err]).toEqual([1, expect.stringMatching(/no DLQ topic orders\.dlq/)]);

      const redriven = await keyflow(['dlq', 'redrive', 'task.results.dlq'], env);
      expect(redriven.code).toBe(2); // a record was refused: not a clean run, for scripts too
      expect(redriven.out).toMatch(/redriven: 1 of 2 records/);
      expect(redriven.out).toMatch(/refused: 1/);
      expect(redriven.out).toContain(`names ${elsewhere}, not ${results}`);
      expect(redriven.out).toContain('own\\x1b[2J'); // what it redrove, its key escaped
      const admin = ns.kafka.admin();
      await admin.connect();
      const [end] = await admin.fetchTopicOffsets(elsewhere);
      await admin.disconnect();
      expect(end.high).toBe('0');

      // Keys, error classes and messages (and an argument echoed in an error) reach the terminal escaped.
      const shown = await keyflow(['dlq', 'show', 'task.results.dlq'], env);
      const missing = await keyflow(['dlq', 'show', 'bad\x1b]0;pwned\x07.dlq'], env);
      for (const text of [shown.out, shown.err, redriven.out, missing.out, missing.err])
        // eslint-disable-next-line no-control-regex
        expect(text).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
      expect(shown.out).toContain('Bad\\x1b[31mClass: boom\\x1b]0;pwned\\x07\\x9b2J');
      expect(missing.err).toContain('bad\\x1b]0;pwned\\x07.dlq');
    } finally {
      await ns.cleanup();
    }
  });

  it('dlq redrive and the ops API refuse a command of a run that ended (its compensation ran), naming the run, its status and why; an awaited one is redriven; --allow-rerun overrides; runs ls pages with --cursor', async () => {
    const r = new OrchestratorHarness('cli-redrive-run');
    try {
      const orch = await r.startOrchestrator();
      await r.readEvents();
      const done = await r.simulateWorker(['slow.prepare', 'slow.undo'], () => ({ output: { ok: true } }));
      const waiting = await r.simulateWorker(['slow.never'], () => undefined); // holdpoke's `call`: never answered
      const api = await orch.ready;
      const env = { ...r.env(), KEYFLOW_API_URL: api };
      const startOne = async () =>
        (await keyflow(['runs', 'start', 'holdpoke', '--json'], env)).json().runId as string;
      const [ended, awaited] = [await startOne(), await startOne()];
      const called = (id: string) => waiting.filter((c) => c.runId === id);
      await eventually('both wait for call', () => called(ended).length && called(awaited).length, {
        timeoutMs: 30_000,
      });
      expect((await keyflow(['runs', 'cancel', ended], env)).code).toBe(0);
      await eventually(
        'the cancelled run compensated',
        () => r.events.items.find((e) => e.event === 'RunCancelled' && e.value.runId === ended),
        { timeoutMs: 30_000 },
      );

      // Each run's command dead-lettered as the workers do: the prepare of the ended run, the call of the other.
      const dead = async (logical: TaskTopic, cmd: (typeof done)[number]) => {
        const m = dlqMessage(
          {
            topic: r.codec.physical(logical),
            partition: 0,
            offset: '0',
            key: Buffer.from(cmd.runId),
            value: r.codec.encode(logical, 'TaskCommand', cmd),
            headers: {},
          },
          {
            errorClass: 'Boom',
            errorMessage: 'x',
            attempts: 1,
            firstFailureAt: 1,
            lastFailureAt: 2,
            consumerGroup: 'g',
          },
        );
        const p = r.ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
        await p.connect();
        await p.send({ topic: `${r.codec.physical(logical)}.dlq`, acks: -1, messages: [m] });
        await p.disconnect();
      };
      const prepare = done.find((c) => c.runId === ended && c.taskType === 'slow.prepare')!;
      await dead(taskTopic('slow.prepare'), prepare);
      await dead(taskTopic('slow.never'), called(awaited)[0]);
      const prepares = () => done.filter((c) => c.runId === ended && c.taskType === 'slow.prepare').length;

      const refused = await keyflow(['dlq', 'redrive', 'task.slow.prepare.dlq', '--key', ended], env);
      expect(refused.code).toBe(2);
      expect(refused.out).toMatch(/redriven: 0 of 1 records/);
      expect(refused.out).toContain(
        `run ${ended} is cancelled: step prepare (attempt 1) of run ${ended} is no longer awaited`,
      );
      expect(refused.out).toMatch(/--allow-rerun/);
      // Without the orchestrator's view (no API), nothing says the run still awaits it: refused too.
      const { KEYFLOW_API_URL: _api, ...noApi } = env;
      const blind = await keyflow(
        ['dlq', 'redrive', 'task.slow.prepare.dlq', '--key', ended, '--json'],
        noApi,
      );
      expect(blind.json()).toMatchObject({ moved: 0, refused: 1 });

      // The ops API (the console's redrive) applies the same check, and its explicit flag overrides it.
      const opsRedrive = async (body: object) =>
        (await fetch(`${api}/ops/dlq/task.slow.prepare.dlq/redrive`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        }).then((res) => res.json())) as Json;
      const viaApi = await opsRedrive({ key: ended });
      expect(viaApi).toMatchObject({ moved: 0, refused: 1 });
      expect(viaApi.refusals[0]).toMatchObject({
        code: 'RUN_ENDED',
        reason: expect.stringContaining(`run ${ended} is cancelled`),
      });
      expect(await opsRedrive({ key: ended, allowRerun: true, dryRun: true })).toMatchObject({
        moved: 1,
        refused: 0,
      });
      expect(prepares()).toBe(1);

      // The command the engine still awaits is redriven without a flag.
      const ok = await keyflow(['dlq', 'redrive', 'task.slow.never.dlq', '--key', awaited], env);
      expect([ok.code, ok.out]).toEqual([0, expect.stringMatching(/redriven: 1 of 1 records/)]);
      await eventually('the awaited command delivered again', () => called(awaited).length, {
        until: (n) => n === 2,
        timeoutMs: 30_000,
      });

      // Said explicitly, the ended run's command goes back.
      const forced = await keyflow(
        ['dlq', 'redrive', 'task.slow.prepare.dlq', '--key', ended, '--allow-rerun'],
        env,
      );
      expect([forced.code, forced.out]).toEqual([0, expect.stringMatching(/redriven: 1 of 1 records/)]);
      await eventually('the forced command delivered', prepares, {
        until: (n) => n === 2,
        timeoutMs: 30_000,
      });

      // runs ls pages: --limit 1, then --cursor with the page's next.
      const first = await keyflow(['runs', 'ls', '--workflow', 'holdpoke', '--limit', '1', '--json'], env);
      expect(first.json().next).toEqual(expect.any(String));
      const second = await keyflow(
        ['runs', 'ls', '--workflow', 'holdpoke', '--limit', '1', '--cursor', first.json().next, '--json'],
        env,
      );
      expect([first.json().runs[0].runId, second.json().runs[0].runId].sort()).toEqual(
        [ended, awaited].sort(),
      );
      const human = await keyflow(['runs', 'ls', '--workflow', 'holdpoke', '--limit', '1'], env);
      expect(human.out).toContain(`(more: --cursor ${first.json().next})`);
    } finally {
      await r.teardown();
    }
  });

  it("replay of the workers' group: refused with live members, a dry run counts stored results, applied it re-publishes them (a command without one runs again only with --allow-rerun) and the orchestrator ignores them", async () => {
    const r = new OrchestratorHarness('cli-replay');
    try {
      // The worker waits for the topics the orchestrator creates; the reader needs them at once.
      const [orch, firstWorker] = await Promise.all([r.startOrchestrator(), r.startWorker()]);
      let worker = firstWorker;
      await r.readEvents();
      const env = { ...r.env(), KEYFLOW_API_URL: await orch.ready };
      const runIds: string[] = [];
      for (let i = 0; i < 3; i++)
        runIds.push((await keyflow(['runs', 'start', 'three-step', '--json'], env)).json().runId);
      await eventually(
        '3 runs ended',
        () => r.events.items.filter((e) => TERMINAL_EVENTS.has(e.event)).length,
        {
          until: (n) => n >= 3,
          timeoutMs: 60_000,
        },
      );
      const group = r.ns.groupId('workers');
      const args = ['replay', group, '--to-earliest', '--topic', 'task.echo', '--json'];

      const refused = await keyflow(args, env);
      expect(refused.code).toBe(1);
      expect(refused.err).toMatch(/live member\(s\).*stop them/);

      worker.kill('SIGTERM');
      await worker.exited;
      const dry = await keyflow([...args, '--dry-run'], env);
      expect(dry.code).toBe(0);
      const total = (rows: Array<Record<string, number>>, k: string) =>
        rows.reduce((n, m) => n + (m[k] ?? 0), 0);
      expect(dry.json()).toMatchObject({ applied: false, members: [] });
      expect([
        total(dry.json().moves, 'records'),
        total(dry.json().moves, 'stored'),
        total(dry.json().moves, 'rerun'),
      ]).toEqual([9, 9, 0]);

      // One completion record gone (expired): that command would run its handler again.
      await r.ns.redis().del(`${idempotencyKeyPrefix(r.prefix)}${runIds[0]}/first`);
      const risky = await keyflow(args, env);
      expect(risky.code).toBe(1);
      expect(risky.err).toMatch(/1 command\(s\).*run again.*--allow-rerun/);
      const applied = await keyflow([...args, '--allow-rerun'], env);
      expect(applied.code).toBe(0);
      expect(applied.json()).toMatchObject({ applied: true });
      expect(total(applied.json().moves, 'rerun')).toBe(1);

      const completedBefore = r.events.items.filter((e) => e.event === 'RunCompleted').length;
      worker = await r.startWorker();
      const metric = async (url: string, name: string) => {
        const text = await (await fetch(`${url}/metrics`)).text();
        return text
          .split('\n')
          .filter((l) => l.startsWith(name))
          .reduce((n, l) => n + Number(l.split(' ').at(-1)), 0);
      };
      const wurl = await worker.ready;
      await eventually(
        '8 stored results re-published',
        () => metric(wurl, 'keyflow_worker_task_replayed_total'),
        {
          until: (n) => n >= 8,
          timeoutMs: 60_000,
        },
      );
      expect(await metric(wurl, 'keyflow_worker_task_attempts_total')).toBe(1); // only the command without a record
      await eventually(
        'the orchestrator ignored the 9 replayed results',
        () => metric(env.KEYFLOW_API_URL, 'keyflow_orchestrator_inputs_ignored_total'),
        { until: (n) => n >= 9, timeoutMs: 30_000 },
      );
      expect(r.events.items.filter((e) => e.event === 'RunCompleted').length).toBe(completedBefore);
      const lag = await keyflow(['groups', 'lag', group, '--json'], env);
      expect(lag.json().every((row: { lag: number }) => row.lag === 0)).toBe(true);

      // A move forward past a command the workers have not read is refused: it would never run.
      worker.kill('SIGTERM');
      await worker.exited;
      expect((await keyflow(['runs', 'start', 'three-step', '--json'], env)).code).toBe(0);
      await eventually(
        'the new command waiting',
        async () => total((await keyflow(['groups', 'lag', group, '--json'], env)).json(), 'lag'),
        { until: (n) => n === 1, timeoutMs: 30_000, intervalMs: 500 },
      );
      const later = String(Date.now() + 3_600_000);
      const forward = await keyflow(['replay', group, '--to-time', later, '--topic', 'task.echo'], env);
      expect(forward.code).toBe(1);
      expect(forward.err).toMatch(/forward past 1 record.*--allow-skip/);
      // The orchestrator's requests would be applied again: the dry run counts the four starts.
      const requests = await keyflow(
        [
          'replay',
          r.ns.groupId('orchestrator'),
          '--to-earliest',
          '--topic',
          'wf.requests',
          '--dry-run',
          '--json',
        ],
        env,
      );
      expect(total(requests.json().moves, 'requests')).toBe(4);
    } finally {
      await r.teardown();
    }
  });

  it('runs cancel compensates the completed step and ends cancelled (once, sent twice with one --idempotency-key); runs terminate stops at once without compensating', async () => {
    const r = new OrchestratorHarness('cli-cancel');
    try {
      const orch = await r.startOrchestrator();
      await r.readEvents();
      // holdpoke: `prepare` (compensated by slow.undo) completes, then `call` never answers (and waits 10 minutes).
      const commands = await r.simulateWorker(['slow.prepare', 'slow.undo'], () => ({
        output: { ok: true },
      }));
      const env = { ...r.env(), KEYFLOW_API_URL: await orch.ready };
      const startOne = async () =>
        (await keyflow(['runs', 'start', 'holdpoke', '--json'], env)).json().runId as string;
      const [cancelled, terminated] = [await startOne(), await startOne()];
      const prepared = (id: string) =>
        r.events.items.some(
          (e) => e.event === 'StepCompleted' && e.value.runId === id && e.value.stepId === 'prepare',
        );
      await eventually('both prepared', () => prepared(cancelled) && prepared(terminated), {
        timeoutMs: 30_000,
      });

      // Sent twice with one --idempotency-key (a shell retry): the same answer, one cancel.
      const cancelOnce = () =>
        keyflow(
          ['runs', 'cancel', cancelled, '--reason', 'customer asked', '--idempotency-key', 'c-1', '--json'],
          env,
        );
      const [first, again] = [await cancelOnce(), await cancelOnce()];
      expect([first.code, again.code]).toEqual([0, 0]);
      expect(again.json()).toEqual(first.json());
      expect(first.json().requestId).toMatch(/^[0-9a-f-]{36}$/);
      expect((await keyflow(['runs', 'terminate', terminated, '--reason', 'stop now'], env)).code).toBe(0);
      const ended = (id: string) =>
        r.events.items.find((e) => e.event === 'RunCancelled' && e.value.runId === id);
      await eventually('both ended', () => ended(cancelled) && ended(terminated), { timeoutMs: 30_000 });
      expect(ended(cancelled)!.value).toMatchObject({ reason: 'customer asked', terminated: false });
      expect(ended(terminated)!.value).toMatchObject({ reason: 'stop now', terminated: true });
      const undone = (id: string) =>
        commands.filter((c) => c.taskType === 'slow.undo' && c.runId === id).length;
      expect([undone(cancelled), undone(terminated)]).toEqual([1, 0]);
      expect(
        r.events.items.filter((e) => e.event === 'RunCancelled' && e.value.runId === cancelled),
      ).toHaveLength(1);
      const shown = await keyflow(['runs', 'show', terminated], env);
      expect(shown.out).toMatch(/RunTerminated\s+stop now/);
    } finally {
      await r.teardown();
    }
  });
});
