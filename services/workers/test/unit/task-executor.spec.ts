import pino from 'pino';
import { ClaimCheck } from '@keyflow/blobs';
import type { EventCodec } from '@keyflow/contracts';
import type { BeginResult, IdempotencyStore, Lease } from '@keyflow/idempotency';
import type { BatchingProducer, ConsumedMessage, HandleContext, Message, Producer } from '@keyflow/kafka';
import { Registry } from '@keyflow/observability';
import type { TaskCommand } from '@keyflow/schemas';
import {
  LeaseHeldError,
  LeaseLostError,
  MAX_WAVE_TASKS,
  TaskExecutor,
  type ExecutorOptions,
  type FlowLimiter,
  workerMetrics,
  type StoredOutcome,
} from '@keyflow/task-runtime';
import type { TaskContext, TaskHandlerFn } from '@keyflow/handler';
import { TaskInputError } from '@keyflow/handler';
import { taskCommand } from '../fixtures/task-command';

/**
 * The executor against fakes of its parts (ADR 0002, step 2): a codec that writes JSON, an idempotency store in a
 * Map that counts its calls, a results producer and a DLQ producer that keep what they are given. What each test
 * checks is the executor's own rule, not the parts'.
 */

/** What the fake codec writes: the event's name and value as JSON. */
const decoded = (b: Buffer | string | null) =>
  JSON.parse(String(b)) as { event: string; value: Record<string, unknown> };

const fakeCodec = {
  logical: (t: string) => t,
  physical: (t: string) => t,
  decodeIfKnown: (_t: string, bytes: Buffer | null) => ({
    event: 'TaskCommand',
    value: JSON.parse(String(bytes)),
  }),
  decode: async (_t: string, bytes: Buffer | null) => ({
    event: 'TaskCommand',
    value: JSON.parse(String(bytes)),
  }),
  encode: (_t: string, event: string, value: unknown) => Buffer.from(JSON.stringify({ event, value })),
} as unknown as EventCodec;

/** An idempotency store in memory: a key holds a lease (its token) or a completion record. */
class FakeStore {
  readonly leaseMs = 30_000;
  readonly records = new Map<string, { token?: string; done?: { result: StoredOutcome; ok: boolean } }>();
  readonly calls = { begin: 0, complete: 0, release: 0 };
  /** When set, completeMany answers false for these keys (another holder took them). */
  refuse = new Set<string>();
  private n = 0;

  async beginMany(
    rs: ReadonlyArray<{ key: string; attempt: number }>,
  ): Promise<BeginResult<StoredOutcome>[]> {
    this.calls.begin++;
    return rs.map(({ key, attempt }) => {
      const r = this.records.get(key);
      if (r?.done) return { state: 'completed', result: r.done.result };
      if (r?.token) return { state: 'running', expiresInMs: 1_000 };
      const token = `t${++this.n}`;
      this.records.set(key, { token });
      return { state: 'acquired', lease: { key, token, attempt } };
    });
  }

  async completeMany(items: ReadonlyArray<{ lease: Lease; result: StoredOutcome; ok: boolean }>) {
    this.calls.complete++;
    return items.map(({ lease, result, ok }) => {
      if (this.refuse.has(lease.key) || this.records.get(lease.key)?.token !== lease.token) return false;
      this.records.set(lease.key, { done: { result, ok } });
      return true;
    });
  }

  async complete(lease: Lease, result: StoredOutcome, ok = true) {
    return (await this.completeMany([{ lease, result, ok }]))[0];
  }

  async release(lease: Lease) {
    this.calls.release++;
    if (this.records.get(lease.key)?.token === lease.token) this.records.delete(lease.key);
  }

  async renew() {
    return true;
  }
}

/** A results producer that keeps each send (one entry per sendAll or send call). */
class FakeResults {
  readonly sends: Message[][] = [];
  async sendAll(_topic: string, messages: Message[]) {
    this.sends.push(messages);
  }
  async send(topic: string, message: Message) {
    return this.sendAll(topic, [message]);
  }
  get events() {
    return this.sends.flat().map((m) => decoded(m.value as Buffer));
  }
}

function setup(
  handlers: Record<string, TaskHandlerFn>,
  bounds: Partial<Pick<ExecutorOptions, 'maxConcurrentHandlers' | 'maxHandlersPerPartition' | 'flow'>> = {},
) {
  const store = new FakeStore();
  const results = new FakeResults();
  const dlq: Array<{ topic: string; messages: unknown[] }> = [];
  const producer = {
    send: async (r: { topic: string; messages: unknown[] }) => void dlq.push(r),
  } as unknown as Producer;
  const registry = new Registry();
  const metrics = workerMetrics(registry);
  const executor = new TaskExecutor({
    codec: fakeCodec,
    producer,
    results: results as unknown as BatchingProducer,
    store: store as unknown as IdempotencyStore<StoredOutcome>,
    claimCheck: new ClaimCheck(null, { maxMessageBytes: 1_048_576, maxBlobBytes: 0, graceMs: 0 }),
    handlers: new Map(Object.entries(handlers)),
    logger: pino({ level: 'silent' }),
    metrics,
    groupId: 'g',
    retry: { initialDelayMs: 1, maxDelayMs: 1 },
    maxConcurrentHandlers: 64,
    ...bounds,
    random: () => 0,
    workerId: 'test-worker',
  });
  const hc: HandleContext = {
    signal: new AbortController().signal,
    shutdown: new AbortController().signal,
    draining: new AbortController().signal,
    redeliveries: 0,
  };
  let offset = 0;
  const handle = (cmd: TaskCommand, partition = 0) => {
    const m: ConsumedMessage = {
      topic: `task.${cmd.taskType}`,
      partition,
      offset: String(offset++),
      key: Buffer.from(cmd.runId),
      value: Buffer.from(JSON.stringify(cmd)),
      headers: {},
      timestamp: String(Date.now()),
    };
    return executor.handle(m, hc);
  };
  const count = async (name: string, labels: Record<string, string>) =>
    (await registry.getSingleMetric(name)!.get()).values
      .filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))
      .reduce((s, v) => s + v.value, 0);
  return { executor, store, results, dlq, handle, count };
}

/** Waits, a turn of the event loop at a time (at most 1,000), until `cond` holds. */
async function until(what: string, cond: () => boolean): Promise<void> {
  for (let i = 0; i < 1_000; i++) {
    if (cond()) return;
    await new Promise((r) => setImmediate(r));
  }
  throw new Error(`never happened: ${what}`);
}

let n = 0;
/** A command of `taskType` for a run of its own. */
const command = (taskType: string, input: unknown) => taskCommand(taskType, `e${++n}`, input);

describe('TaskExecutor (against fakes of the store, the producers and the codec)', () => {
  it('handles the messages handed over in one turn as one wave: one begin call, one complete call, one send', async () => {
    const seen: unknown[] = [];
    const { store, results, handle } = setup({ echo: async (input) => (seen.push(input), { got: input }) });
    const cmds = Array.from({ length: 10 }, (_, i) => command('echo', { i }));
    await Promise.all(cmds.map(handle));
    expect(store.calls).toEqual({ begin: 1, complete: 1, release: 0 });
    expect(results.sends).toHaveLength(1);
    expect(seen).toHaveLength(10);
    const events = results.events;
    expect(events.map((e) => e.event)).toEqual(Array(10).fill('TaskCompleted'));
    for (const c of cmds) {
      const r = events.find((e) => e.value.idempotencyKey === c.idempotencyKey)!;
      expect(JSON.parse(r.value.output as string)).toEqual({ got: JSON.parse(c.input) });
      expect(r.value.replayed).toBe(false);
      expect(r.value.workerId).toBe('test-worker');
      expect((r.value.metadata as { causationId: string }).causationId).toBe(c.metadata.eventId);
    }
  });

  it('takes at most MAX_WAVE_TASKS messages of a turn into one wave, the rest in the next, each handled once', async () => {
    const { store, handle, results } = setup({ noop: async () => null });
    const n = 2 * MAX_WAVE_TASKS + 22;
    await Promise.all(Array.from({ length: n }, (_, i) => handle(command('noop', { i }))));
    expect(store.calls.begin).toBe(3); // MAX_WAVE_TASKS + MAX_WAVE_TASKS + 22
    expect(new Set(results.events.map((e) => e.value.idempotencyKey)).size).toBe(n);
  });

  it('counts each success exactly once: tasks completed, attempts ok, handler time observed', async () => {
    const { handle, count } = setup({ noop: async () => null });
    await Promise.all(Array.from({ length: 7 }, () => handle(command('noop', {}))));
    await handle(command('noop', {}));
    expect(await count('keyflow_worker_tasks_total', { type: 'noop', outcome: 'completed' })).toBe(8);
    expect(await count('keyflow_worker_task_attempts_total', { type: 'noop', result: 'ok' })).toBe(8);
    const histogram = await count('keyflow_worker_handler_duration_seconds', { type: 'noop' });
    expect(histogram).toBeGreaterThan(0); // buckets, sum and count of 8 observations
  });

  it('re-publishes a completed step from its record, replayed, without calling the handler', async () => {
    let calls = 0;
    const { handle, results } = setup({ once: async () => (calls++, 'done') });
    const cmd = command('once', {});
    await handle(cmd);
    await handle(cmd);
    expect(calls).toBe(1);
    const events = results.events;
    expect(events).toHaveLength(2);
    expect(events.map((e) => e.value.replayed)).toEqual([false, true]);
    expect(events[1].value.output).toBe(events[0].value.output);
  });

  it('retries a failed attempt with backoff and records the attempt that succeeded', async () => {
    let calls = 0;
    const { handle, results, store } = setup({
      flaky: async (_i, ctx: TaskContext) => {
        calls++;
        if (ctx.attempt < 3) throw new Error(`attempt ${ctx.attempt} failed`);
        return ctx.attempt;
      },
    });
    await handle(command('flaky', {}));
    expect(calls).toBe(3);
    expect(results.events.map((e) => [e.event, e.value.output])).toEqual([['TaskCompleted', '3']]);
    expect(store.calls.complete).toBe(1);
  });

  it('answers a step whose lease another holder has with a retryable LeaseHeldError, and runs nothing', async () => {
    let calls = 0;
    const { handle, store, results } = setup({ x: async () => calls++ });
    const cmd = command('x', {});
    store.records.set(cmd.idempotencyKey, { token: 'someone-else' });
    await expect(handle(cmd)).rejects.toBeInstanceOf(LeaseHeldError);
    expect(calls).toBe(0);
    expect(results.sends).toHaveLength(0);
  });

  it('publishes nothing when the record is refused (the lease was lost) and rejects for the in-place retry', async () => {
    const { handle, store, results } = setup({ x: async () => 1 });
    const cmd = command('x', {});
    store.refuse.add(cmd.idempotencyKey);
    await expect(handle(cmd)).rejects.toBeInstanceOf(LeaseLostError);
    expect(results.sends).toHaveLength(0);
  });

  it('dead-letters input its handler refuses (TaskInputError) and answers the step with a DEAD_LETTERED failure', async () => {
    const { handle, dlq, results, store } = setup({
      picky: async () => {
        throw new TaskInputError('no such customer');
      },
    });
    const cmd = command('picky', {});
    await handle(cmd);
    expect(dlq.map((d) => d.topic)).toEqual(['task.picky.dlq']);
    const [failed] = results.events;
    expect(failed.event).toBe('TaskFailed');
    expect((failed.value.error as { code: string; retryable: boolean }).code).toBe('DEAD_LETTERED');
    expect(store.records.has(cmd.idempotencyKey)).toBe(false); // lease released: a redrive after a fix runs it
  });

  it('dead-letters a command of a task type it has no handler for', async () => {
    const { handle, dlq, results } = setup({});
    await handle(command('unknown', {}));
    expect(dlq.map((d) => d.topic)).toEqual(['task.unknown.dlq']);
    expect(results.events.map((e) => e.event)).toEqual(['TaskFailed']);
  });

  it('gives handlers a context whose plain fields are its own and whose signal, logger and trace are made on read', async () => {
    let ctx: TaskContext | undefined;
    const { handle } = setup({
      look: async (_i, c) => {
        ctx = c;
        expect(c.signal.aborted).toBe(false);
        expect(typeof c.logger.info).toBe('function');
        expect(c.trace).toEqual({ traceparent: null, tracestate: null });
        return null;
      },
    });
    const cmd = command('look', {});
    await handle(cmd);
    expect(Object.keys(ctx!).sort()).toEqual(
      ['attempt', 'correlationId', 'idempotencyKey', 'runId', 'stepAttempt', 'stepId', 'taskType'].sort(),
    );
    expect({ ...ctx }).toEqual({
      runId: cmd.runId,
      stepId: cmd.stepId,
      taskType: 'look',
      stepAttempt: 1,
      attempt: 1,
      idempotencyKey: cmd.idempotencyKey,
      correlationId: cmd.metadata.correlationId,
    });
  });

  it("a flow-limited task waiting behind its partition's handlers holds no admission; another partition's is admitted", async () => {
    let admitted = 0;
    let released = 0;
    const flow = {
      limits: (type: string) => type === 'limited',
      keyOf: () => 'k',
      admit: async () => (admitted++, { n: admitted }),
      release: () => void released++,
    } as unknown as FlowLimiter;
    const gates: Array<() => void> = [];
    const { executor, handle } = setup(
      { limited: () => new Promise<null>((r) => gates.push(() => r(null))) },
      { maxConcurrentHandlers: 4, maxHandlersPerPartition: 2, flow },
    );
    const onPartition0 = Array.from({ length: 5 }, () => handle(command('limited', {}), 0));
    await until('two handlers of partition 0 to start', () => gates.length === 2);
    // Three wait for partition 0's slots: none of them took an admission meanwhile.
    expect(admitted).toBe(2);
    expect(executor.handlerStats()).toEqual({ running: 2, waiting: 3 });
    const onPartition1 = handle(command('limited', {}), 1);
    await until("partition 1's handler to start", () => gates.length === 3);
    expect(admitted).toBe(3);
    // Each handler let go as it starts: the three that waited are admitted then, one by one.
    await until('every task to be admitted', () => {
      while (gates.length > 0) gates.shift()!();
      return admitted === 6;
    });
    await until('the last handlers to start', () => {
      while (gates.length > 0) gates.shift()!();
      return executor.handlerStats().waiting === 0;
    });
    while (gates.length > 0) gates.shift()!();
    await Promise.all([...onPartition0, onPartition1]);
    expect(released).toBe(6);
    expect(executor.handlerStats()).toEqual({ running: 0, waiting: 0 });
  });
});
