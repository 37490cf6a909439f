import { randomBytes } from 'node:crypto';
import { EventCodec, toWireFormat } from '@keyflow/contracts';
import { DLQ_HEADERS, header, redrive } from '@keyflow/ops';
import { idempotencyKeyPrefix } from '@keyflow/idempotency';
import { MAX_WAVE_TASKS } from '@keyflow/task-runtime';
import { createLogger } from '@keyflow/observability';
import type { TaskCommand, TaskCompleted, TaskFailed } from '@keyflow/schemas';
import { Collector, eventually, metricValue } from '@keyflow/testing';
import type { KafkaMessage } from '@keyflow/kafka';
import { WorkerHarness } from './support';
import { schemaSet, taskTopic } from '@keyflow/schemas';

jest.setTimeout(120_000);

describe('a worker process', () => {
  const h = new WorkerHarness('worker');
  beforeAll(async () => {
    await h.setup(['seq', 'flaky', 'refuse', 'poison', 'slow', 'typed', 'odd']);
    await h.startWorker({ WORKER_RETRY_INITIAL_MS: '200', WORKER_RETRY_MAX_MS: '1000' });
  });
  afterAll(() => h.teardown());

  const resultFor = async (idempotencyKey: string) =>
    (await eventually(
      `result for ${idempotencyKey}`,
      () => h.results.items.find((r) => r.value.idempotencyKey === idempotencyKey),
      {
        timeoutMs: 60_000,
      },
    ))!;

  it('runs a task and publishes TaskCompleted keyed by run id, caused by the command', async () => {
    const cmd = h.command('seq', 'e1', { entity: 'e1', seq: 1 });
    await h.send([cmd]);
    const r = await resultFor(cmd.idempotencyKey);
    expect(r.event).toBe('TaskCompleted');
    const v = r.value as TaskCompleted;
    expect(JSON.parse(v.output)).toEqual({ entity: 'e1', seq: 1 });
    expect(v.metadata.causationId).toBe(cmd.metadata.eventId);
    expect(v.metadata.key).toBe(cmd.runId);
    expect(v.metadata.correlationId).toBe(cmd.runId);
    expect(v.replayed).toBe(false);
  });

  it("without a trace exporter, a command's trace reaches its result's headers and metadata and its task's log lines", async () => {
    // The worker runs without OpenTelemetry's context manager then (no AsyncLocalStorage): the executor passes the
    // task's context on explicitly.
    const traceId = randomBytes(16).toString('hex');
    const traceparent = `00-${traceId}-${randomBytes(8).toString('hex')}-01`;
    const cmd = h.command('flaky', 'e-trace', { failTimes: 1 }, { maxAttempts: 3 });
    const handlerReads = h.command('odd', 'e-trace-2', {});
    await h.send([cmd, handlerReads], 500, { traceparent });
    // A handler gets the run's trace context to pass on downstream (ctx.trace).
    const read = await resultFor(handlerReads.idempotencyKey);
    expect(JSON.parse((read.value as TaskCompleted).output).traceparent).toMatch(
      new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`),
    );
    const r = await resultFor(cmd.idempotencyKey);
    expect(r.event).toBe('TaskCompleted');
    expect(r.value.metadata.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
    expect(String(r.headers.traceparent)).toBe(r.value.metadata.traceparent);
    const retried = await eventually('the log line of the retried attempt', () =>
      h.workers[0].logs
        .map((l) => {
          try {
            return JSON.parse(l) as { msg?: string; correlationId?: string; trace_id?: string };
          } catch {
            return undefined;
          }
        })
        .find((l) => l?.msg === 'task attempt failed; retrying' && l.correlationId === cmd.runId),
    );
    expect(retried?.trace_id).toBe(traceId);
  });

  it('fails twice then succeeds: completed on attempt 3, with delays inside the backoff bounds', async () => {
    const cmd = h.command('flaky', 'e2', { failTimes: 2 }, { maxAttempts: 5 });
    await h.send([cmd]);
    const r = await resultFor(cmd.idempotencyKey);
    expect(r.event).toBe('TaskCompleted');
    expect(JSON.parse((r.value as TaskCompleted).output)).toEqual({ attempt: 3 });
    const attempts = await h.rows<{ attempt: number; at_ms: string }>(
      'select attempt, at_ms from {t}_attempt where idempotency_key = $1 order by attempt',
      [cmd.idempotencyKey],
    );
    expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3]);
    const gaps = attempts.slice(1).map((a, i) => Number(a.at_ms) - Number(attempts[i].at_ms));
    // Full jitter: gap after attempt n is in [0, min(1000, 200 * 2^(n-1))] plus handler and bookkeeping time.
    expect(gaps[0]).toBeLessThanOrEqual(200 + 250);
    expect(gaps[1]).toBeLessThanOrEqual(400 + 250);
    expect(gaps.every((g) => g >= 0)).toBe(true);
  });

  it('a non-retryable error fails the task after one attempt, with its class, message and code', async () => {
    const cmd = h.command('refuse', 'e3', {}, { maxAttempts: 5 });
    await h.send([cmd]);
    const r = await resultFor(cmd.idempotencyKey);
    expect(r.event).toBe('TaskFailed');
    const { error } = r.value as TaskFailed;
    expect(error).toMatchObject({
      errorClass: 'NonRetryableTaskError',
      message: 'card declined',
      retryable: false,
      code: 'DECLINED',
      attempts: 1,
    });
    expect(
      await h.rows('select * from {t}_exec where idempotency_key = $1', [cmd.idempotencyKey]),
    ).toHaveLength(1);
  });

  it('a handler error whose code is not a string fails the step with that code as text, and its key goes on', async () => {
    const failing = h.command('odd', 'e-code', { throwCode: 11000 }, { maxAttempts: 1 });
    const next = h.command('odd', 'e-code', {});
    await h.send([failing, next]);
    const r = await resultFor(failing.idempotencyKey);
    expect(r.event).toBe('TaskFailed');
    expect((r.value as TaskFailed).error).toMatchObject({ code: '11000', attempts: 1 });
    expect((await resultFor(next.idempotencyKey)).event).toBe('TaskCompleted');
  });

  it('an output JSON cannot hold fails the step once with OUTPUT_NOT_JSON (not retried), and its key goes on', async () => {
    const bad = (['function', 'circular', 'bigint'] as const).map((output) =>
      h.command('odd', 'e-json', { output }, { maxAttempts: 3 }),
    );
    const next = h.command('odd', 'e-json', {});
    await h.send([...bad, next]);
    for (const cmd of bad) {
      const r = await resultFor(cmd.idempotencyKey);
      expect(r.event).toBe('TaskFailed');
      expect((r.value as TaskFailed).error).toMatchObject({
        code: 'OUTPUT_NOT_JSON',
        attempts: 1,
        retryable: false,
      });
    }
    expect((await resultFor(next.idempotencyKey)).event).toBe('TaskCompleted');
  });

  it('a thrown value that is no Error and cannot be printed fails the step within its attempts, and its key goes on', async () => {
    const bare = h.command('odd', 'e-bare', { throwBare: true }, { maxAttempts: 2 });
    const next = h.command('odd', 'e-bare', {});
    await h.send([bare, next]);
    const r = await resultFor(bare.idempotencyKey);
    expect(r.event).toBe('TaskFailed');
    expect((r.value as TaskFailed).error.attempts).toBe(2);
    expect((await resultFor(next.idempotencyKey)).event).toBe('TaskCompleted');
    const runs = await h.rows('select * from {t}_exec where idempotency_key = $1', [bare.idempotencyKey]);
    expect(runs).toHaveLength(2);
  });

  it('a completion record written before codes were text, or without an output, is re-published as a valid result', async () => {
    // As an earlier version stored them: a numeric code; a completed outcome whose output JSON made nothing of.
    const coded = h.command('odd', 'e-old-1', {});
    const noOutput = h.command('odd', 'e-old-2', {});
    const redis = h.ns.redis();
    const at = Date.now();
    await redis.set(
      `${idempotencyKeyPrefix(h.prefix)}${coded.idempotencyKey}`,
      JSON.stringify({
        s: 'done',
        ok: false,
        a: 1,
        r: {
          kind: 'failed',
          error: {
            errorClass: 'Error',
            message: 'unavailable',
            retryable: false,
            code: 14,
            attempts: 1,
            firstFailureAt: at,
            lastFailureAt: at,
          },
        },
      }),
      'PX',
      60_000,
    );
    await redis.set(
      `${idempotencyKeyPrefix(h.prefix)}${noOutput.idempotencyKey}`,
      JSON.stringify({ s: 'done', ok: true, a: 1, r: { kind: 'completed', durationMs: 3 } }),
      'PX',
      60_000,
    );
    await h.send([coded, noOutput]);
    const failed = await resultFor(coded.idempotencyKey);
    expect(failed.event).toBe('TaskFailed');
    expect((failed.value as TaskFailed).error).toMatchObject({ code: '14', message: 'unavailable' });
    const empty = await resultFor(noOutput.idempotencyKey);
    expect(empty.event).toBe('TaskFailed');
    expect((empty.value as TaskFailed).error.code).toBe('OUTPUT_NOT_JSON');
    // Neither ran again: the record answered.
    expect(
      await h.rows('select * from {t}_exec where idempotency_key = any($1)', [
        [coded.idempotencyKey, noOutput.idempotencyKey],
      ]),
    ).toHaveLength(0);
  });

  it('an attempt that times out is retried', async () => {
    const cmd = h.command('flaky', 'e4', { hangFirst: true }, { timeoutMs: 500, maxAttempts: 3 });
    await h.send([cmd]);
    const r = await resultFor(cmd.idempotencyKey);
    expect(r.event).toBe('TaskCompleted');
    expect(JSON.parse((r.value as TaskCompleted).output)).toEqual({ attempt: 2 });
  });

  it('a redelivered completed command re-publishes the stored result without running the handler', async () => {
    const cmd = h.command('seq', 'e5', { entity: 'e5', seq: 1 });
    await h.send([cmd]);
    await resultFor(cmd.idempotencyKey);
    await h.send([cmd]); // the same command again, as after a crash before the commit
    const both = await eventually(
      'two results',
      () => h.results.items.filter((r) => r.value.idempotencyKey === cmd.idempotencyKey),
      { until: (rs) => rs.length === 2 },
    );
    expect(both.map((r) => (r.value as TaskCompleted).replayed)).toEqual([false, true]);
    expect(both[1].value.metadata.eventId).toBe(both[0].value.metadata.eventId);
    expect(
      await h.rows('select * from {t}_exec where idempotency_key = $1', [cmd.idempotencyKey]),
    ).toHaveLength(1);
  });

  it('a poison message never blocks its key: it goes to the DLQ with full metadata, the next 10 complete, and a redrive after the fix completes it', async () => {
    const poison = h.command('poison', 'e6', { entity: 'e6', seq: 0, poison: true });
    const valid = Array.from({ length: 10 }, (_, i) =>
      h.command('poison', 'e6', { entity: 'e6', seq: i + 1 }),
    );
    await h.send([poison, ...valid]);
    await eventually(
      'the 10 valid ones completed',
      () =>
        h.results.items.filter((r) => valid.some((v) => v.idempotencyKey === r.value.idempotencyKey)).length,
      { until: (n) => n === 10 },
    );
    const order = await h.rows<{ seq: number }>("select seq from {t}_order where entity = 'e6' order by id");
    expect(order.map((o) => o.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);

    const dlqTopic = `${h.codec.physical(taskTopic('poison'))}.dlq`;
    const dlq = new Collector<KafkaMessage>();
    const reader = h.ns.kafka.consumer({ groupId: h.ns.groupId('dlq-reader') });
    await reader.connect();
    await reader.subscribe({ topic: dlqTopic, fromBeginning: true });
    await reader.run({ eachMessage: async ({ message }) => dlq.push(message) });
    const [record] = await dlq.wait(1);
    await reader.disconnect();
    expect(record.key!.toString()).toBe('e6');
    expect(record.value!.equals(h.codec.encode(taskTopic('poison'), 'TaskCommand', poison))).toBe(true);
    const hd = (n: string) => header(record.headers, n);
    expect(hd(DLQ_HEADERS.originalTopic)).toBe(h.codec.physical(taskTopic('poison')));
    expect(Number(hd(DLQ_HEADERS.originalPartition))).toBeGreaterThanOrEqual(0);
    expect(Number(hd(DLQ_HEADERS.originalOffset))).toBeGreaterThanOrEqual(0);
    expect(hd(DLQ_HEADERS.errorClass)).toBe('TaskInputError');
    expect(hd(DLQ_HEADERS.errorMessage)).toContain('"amount" is not a number');
    expect(hd(DLQ_HEADERS.attempts)).toBe('1');
    expect(Number(hd(DLQ_HEADERS.firstFailureAt))).toBeLessThanOrEqual(Number(hd(DLQ_HEADERS.lastFailureAt)));
    expect(hd(DLQ_HEADERS.consumerGroup)).toBe(h.groupId);
    expect(hd(DLQ_HEADERS.host)).toMatch(/\/\d+$/);

    await h.rows("insert into {t}_fix(name) values ('poison')");
    const producer = h.ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const report = await redrive(h.ns.kafka, {
      dlqTopic,
      filter: { errorClass: 'TaskInputError', key: 'e6' },
      ratePerSec: 50,
      producer,
      logger: createLogger('redrive', { level: 'silent' }),
      ledger: { codec: h.codec, handledBy: 'worker-basics-test' },
    });
    await producer.disconnect();
    expect(report).toMatchObject({ moved: 1, byTopic: { [h.codec.physical(taskTopic('poison'))]: 1 } });
    const results = await eventually(
      'the poison result, then the redriven completion',
      () => h.results.items.filter((x) => x.value.idempotencyKey === poison.idempotencyKey),
      {
        until: (rs) => rs.length === 2,
        timeoutMs: 60_000,
      },
    );
    // First a non-retryable TaskFailed (so the run does not wait for a step timeout), then the redrive completes it.
    expect(results.map((x) => x.event)).toEqual(['TaskFailed', 'TaskCompleted']);
    expect((results[0].value as TaskFailed).error).toMatchObject({
      errorClass: 'TaskInputError',
      code: 'DEAD_LETTERED',
      retryable: false,
    });
  });

  it("a command whose input breaks its task's contract goes to the DLQ with INPUT_SCHEMA and the issues, never reaching the handler; a valid one runs", async () => {
    const bad = h.command('typed', 'e7', { entity: 'e7', amount: -5, card: 4111111111111111 });
    const good = h.command('typed', 'e7', { entity: 'e7', amount: 12, card: '4111-1111' });
    await h.send([bad, good]);
    const failed = await resultFor(bad.idempotencyKey);
    expect(failed.event).toBe('TaskFailed');
    expect((failed.value as TaskFailed).error).toMatchObject({ code: 'DEAD_LETTERED', retryable: false });
    const ok = await resultFor(good.idempotencyKey);
    expect(JSON.parse((ok.value as TaskCompleted).output)).toEqual({ charged: 12 });

    const dlq = new Collector<KafkaMessage>();
    const reader = h.ns.kafka.consumer({ groupId: h.ns.groupId('typed-dlq-reader') });
    await reader.connect();
    await reader.subscribe({ topic: `${h.codec.physical(taskTopic('typed'))}.dlq`, fromBeginning: true });
    await reader.run({ eachMessage: async ({ message }) => dlq.push(message) });
    const [record] = await dlq.wait(1);
    await reader.disconnect();
    const hd = (n: string) => header(record.headers, n);
    expect(hd(DLQ_HEADERS.errorClass)).toBe('TaskInputError');
    expect(hd(DLQ_HEADERS.errorCode)).toBe('INPUT_SCHEMA');
    expect(hd(DLQ_HEADERS.errorMessage)).toMatch(
      /input of task typed does not match its contract: amount: .*; card: /,
    );
    // The issues name paths and rules, never the values.
    expect(hd(DLQ_HEADERS.errorMessage)).not.toContain('4111111111111111');
    // The handler ran once: for the valid command only.
    const runs = await h.rows('select idempotency_key from {t}_exec where idempotency_key in ($1, $2)', [
      bad.idempotencyKey,
      good.idempotencyKey,
    ]);
    expect(runs).toEqual([{ idempotency_key: good.idempotencyKey }]);
  });

  it("a handler output that breaks its task's contract fails the step once with OUTPUT_SCHEMA, not retried", async () => {
    const cmd = h.command(
      'typed',
      'e8',
      { entity: 'e8', amount: 3, card: 'c', lie: true },
      { maxAttempts: 5 },
    );
    await h.send([cmd]);
    const r = await resultFor(cmd.idempotencyKey);
    expect(r.event).toBe('TaskFailed');
    expect((r.value as TaskFailed).error).toMatchObject({
      errorClass: 'NonRetryableTaskError',
      code: 'OUTPUT_SCHEMA',
      retryable: false,
      attempts: 1,
    });
    expect((r.value as TaskFailed).error.message).toMatch(
      /output of task typed does not match its contract: charged: /,
    );
    expect(
      await h.rows('select * from {t}_exec where idempotency_key = $1', [cmd.idempotencyKey]),
    ).toHaveLength(1);
  });

  it('undecodable bytes and an unknown schema id go to the DLQ with the decode error', async () => {
    await h.sendRaw('seq', 'bad', Buffer.from('not avro'));
    await h.sendRaw('seq', 'bad', toWireFormat(1_999_999_999, Buffer.from([1, 2, 3])));
    const ok = h.command('seq', 'bad', { entity: 'bad', seq: 1 });
    await h.send([ok]);
    await resultFor(ok.idempotencyKey);
    const dlq = new Collector<KafkaMessage>();
    const reader = h.ns.kafka.consumer({ groupId: h.ns.groupId('dlq-seq') });
    await reader.connect();
    await reader.subscribe({ topic: `${h.codec.physical(taskTopic('seq'))}.dlq`, fromBeginning: true });
    await reader.run({ eachMessage: async ({ message }) => dlq.push(message) });
    const records = await dlq.wait(2);
    await reader.disconnect();
    expect(records.map((r) => header(r.headers, DLQ_HEADERS.errorClass))).toEqual([
      'MissingMagicByteError',
      'UnknownSchemaIdError',
    ]);
  });

  /**
   * Sends 600 commands of `seq` at once (keys `<label>-<i>`), each encoded by `encode`, and checks that the worker
   * leased them in begin calls of at most MAX_WAVE_TASKS (its wave histogram counts each call's commands) and ran
   * each once.
   */
  const backlogInWaves = async (label: string, encode: (c: TaskCommand) => Buffer) => {
    const url = await h.workers[0].ready;
    const waves = async () => ({
      count: await metricValue(url, 'keyflow_worker_wave_tasks_count'),
      upToMax: await metricValue(url, 'keyflow_worker_wave_tasks_bucket', { le: String(MAX_WAVE_TASKS) }),
      tasks: await metricValue(url, 'keyflow_worker_wave_tasks_sum'),
    });
    const before = await waves();
    const cmds = Array.from({ length: 600 }, (_, i) =>
      h.command('seq', `${label}-${i}`, { entity: `${label}-${i}`, seq: 1 }),
    );
    await h.send(cmds, cmds.length, undefined, encode); // in one request: all handed over together
    await eventually(
      '600 results',
      () => cmds.filter((c) => h.results.items.some((r) => r.value.idempotencyKey === c.idempotencyKey)),
      { until: (done) => done.length === cmds.length, timeoutMs: 60_000 },
    );
    const after = await waves();
    // metricValue reads a series not exposed as 0: the waves must have been counted, and the bound's bucket with them.
    expect(after.count).toBeGreaterThan(before.count);
    expect(after.tasks - before.tasks).toBeGreaterThanOrEqual(cmds.length);
    expect(after.count - after.upToMax).toBe(before.count - before.upToMax); // no begin call above the bound
    const ids = cmds.map((c) => c.idempotencyKey);
    expect(await h.rows('select * from {t}_exec where idempotency_key = any($1)', [ids])).toHaveLength(600);
  };

  it('takes the leases of a backlog in calls of at most MAX_WAVE_TASKS commands, each command completed once', async () => {
    // The consumer hands over up to 64 commands per partition in one event-loop turn (3 partitions here, more than
    // MAX_WAVE_TASKS in all); the executor leases them in waves of at most MAX_WAVE_TASKS, the rest in the next
    // turns: one Lua script call never holds Redis for the whole in-flight bound, and the next wave is decoded while
    // the first one's call is at Redis (BENCHMARKS.md "Workers"). The worker registered this schema itself: no
    // command waits for a schema fetch.
    await backlogInWaves('wave', (c) => h.codec.encode(taskTopic('seq'), 'TaskCommand', c));
  });

  it('commands that waited for one schema fetch are leased in calls of at most MAX_WAVE_TASKS too, each completed once', async () => {
    // A newer TaskCommand than the worker's (one more optional field): the first commands of each partition wait
    // for the worker's fetch of that schema id, all on the same fetch, and are leased together after it.
    const current = schemaSet().topicSchema(taskTopic('seq')) as { fields: unknown[] };
    const newer = new EventCodec({
      registryUrl: h.ns.infra.schemaRegistryUrl,
      topicPrefix: h.prefix,
      topicSchemas: {
        [taskTopic('seq')]: {
          ...current,
          fields: [...current.fields, { name: 'note', type: ['null', 'string'], default: null }],
        },
      },
    });
    await newer.registerTopics([taskTopic('seq')]);
    await backlogInWaves('late', (c) =>
      newer.encode(taskTopic('seq'), 'TaskCommand', { ...c, note: 'v2' } as TaskCommand),
    );
  });

  it('counts each completed task exactly once: tasks, attempts and handler time', async () => {
    // The executor adds a wave's successes to the counters in one call per counter (before the wave's results are
    // sent): none is left out or counted twice.
    const url = await h.workers[0].ready;
    const counts = async () => ({
      completed: await metricValue(url, 'keyflow_worker_tasks_total', { type: 'seq', outcome: 'completed' }),
      ok: await metricValue(url, 'keyflow_worker_task_attempts_total', { type: 'seq', result: 'ok' }),
      timed: await metricValue(url, 'keyflow_worker_handler_duration_seconds_count', { type: 'seq' }),
    });
    const before = await counts();
    const cmds = Array.from({ length: 40 }, (_, i) =>
      h.command('seq', `counted-${i}`, { entity: `counted-${i}`, seq: 1 }),
    );
    await h.send(cmds, cmds.length);
    for (const c of cmds) await resultFor(c.idempotencyKey);
    expect(await counts()).toEqual({
      completed: before.completed + cmds.length,
      ok: before.ok + cmds.length,
      timed: before.timed + cmds.length,
    });
  });

  it('answers /health and exposes Prometheus metrics', async () => {
    const url = await h.workers[0].ready;
    const health = await fetch(`${url}/health`);
    expect(health.status).toBe(200);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/keyflow_worker_tasks_total\{[^}]*type="seq"[^}]*outcome="completed"[^}]*\} \d+/);
    expect(metrics).toMatch(/keyflow_worker_dlq_total\{[^}]*error_class="TaskInputError"/);
    expect(metrics).toContain('keyflow_worker_handler_duration_seconds_bucket');
  });
});
