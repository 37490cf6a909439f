import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Consumer, Producer } from '@keyflow/kafka';
import { EventCodec, newMetadata } from '@keyflow/contracts';
import type { Browser } from 'playwright-core';
import { Collector, eventually } from '../await';
import { ensureDebianTool } from '../debian-tool';
import { TestNamespace } from '../namespace';
import { startServiceProcess, type ServiceProcess } from '../service-process';
import { Topic, taskTopic, type TaskCommand } from '@keyflow/schemas';

/** The repository's root (service entries and the CLI's bin are given relative to it). */
const ROOT = join(__dirname, '../../../..');

/** The Standard Webhooks secret of the three-step workflow in the harness's orchestrators. */
export const TEST_WEBHOOK_SECRET = `whsec_${Buffer.from('three-step-test-secret-0123456789').toString('base64')}`;

export type Lifecycle = {
  event: string;
  value: Record<string, unknown> & { runId: string; stepId?: string; metadata: { eventId: string } };
};

/** The lifecycle events that end a run (wf.events). */
export const TERMINAL_EVENTS: ReadonlySet<string> = new Set([
  'RunCompleted',
  'RunFailed',
  'RunCompensated',
  'RunCancelled',
]);

/**
 * The distinct lifecycle events of `events`, first occurrence of each event id kept. A kafkajs consumer that restarts
 * (a crash it recovers from, a rebalance) reads again from its last committed offset, so a live reader can see an
 * event twice; consumers dedupe on `metadata.eventId` (README "Contracts"), and so do the checks. Two StepCompleted
 * of one step with different event ids are still two.
 */
export function distinctEvents(events: { items: Lifecycle[] }): Lifecycle[] {
  const seen = new Map<string, Lifecycle>();
  for (const e of events.items)
    if (!seen.has(e.value.metadata.eventId)) seen.set(e.value.metadata.eventId, e);
  return [...seen.values()];
}

/**
 * Topics, processes, a wf.events reader and simulated workers for orchestrator tests (and the chaos and scale
 * scenarios): service entries are given relative to the repository's root.
 */
export class OrchestratorHarness {
  readonly ns: TestNamespace;
  readonly prefix: string;
  readonly codec: EventCodec;
  readonly events = new Collector<Lifecycle>();
  readonly processes: ServiceProcess[] = [];
  private consumers: Consumer[] = [];
  private producer?: Producer;

  constructor(label: string) {
    this.ns = new TestNamespace(label);
    this.prefix = `${this.ns.prefix}.`;
    this.codec = new EventCodec({ registryUrl: this.ns.infra.schemaRegistryUrl, topicPrefix: this.prefix });
  }

  /** Set: the services' env leaves ORCHESTRATOR_GROUP_ID and WORKER_GROUP_ID unset (their defaults apply). */
  defaultGroupIds = false;

  env(extra: Record<string, string> = {}): Record<string, string> {
    return {
      KAFKA_BROKERS: this.ns.infra.kafkaBrokers.join(','),
      SCHEMA_REGISTRY_URL: this.ns.infra.schemaRegistryUrl,
      REDIS_URL: this.ns.infra.redisUrl,
      KEYFLOW_TOPIC_PREFIX: this.prefix,
      ...(this.defaultGroupIds
        ? {}
        : {
            ORCHESTRATOR_GROUP_ID: this.ns.groupId('orchestrator'),
            WORKER_GROUP_ID: this.ns.groupId('workers'),
          }),
      ORCHESTRATOR_PARTITIONS: '4',
      TASK_PARTITIONS: '4',
      WORKER_TASK_PARTITIONS: '4',
      WORKER_RESULT_PARTITIONS: '4',
      ORCHESTRATOR_SESSION_TIMEOUT_MS: '6000',
      WORKER_SESSION_TIMEOUT_MS: '10000',
      WORKER_HEARTBEAT_INTERVAL_MS: '1000',
      WEBHOOKS_ENABLED: 'true',
      WEBHOOK_SECRETS: JSON.stringify({ 'three-step': TEST_WEBHOOK_SECRET }),
      ...extra,
    };
  }

  /**
   * An orchestrator process: the tests' own (test workflows, the order saga, the test definitions), or another
   * entry such as examples/test-workloads/src/orchestrator.ts (which also has the GeoNames ETL).
   */
  async startOrchestrator(
    extra: Record<string, string> = {},
    entry = 'services/orchestrator/test/fixtures/test-orchestrator.ts',
  ): Promise<ServiceProcess> {
    const p = startServiceProcess(join(ROOT, entry), this.env(extra), 'orchestrator ready', { cwd: ROOT });
    this.processes.push(p);
    await p.ready;
    return p;
  }

  /**
   * A worker process: examples/test-workloads' (the handlers of the test workloads and of every example), or another
   * entry such as the workers' test process.
   */
  async startWorker(
    extra: Record<string, string> = {},
    entry = 'examples/test-workloads/src/worker.ts',
  ): Promise<ServiceProcess> {
    const p = startServiceProcess(join(ROOT, entry), this.env(extra), 'worker ready', { cwd: ROOT });
    this.processes.push(p);
    await p.ready;
    return p;
  }

  /** The wf.requests value of a StartRun for `runId` (key, correlation and business key = run id, input `{}`). */
  startRunValue(runId: string, workflow = 'three-step', trigger = 'test'): Buffer {
    return this.codec.encode(Topic.WF_REQUESTS, 'StartRun', {
      metadata: newMetadata('StartRun', { key: runId, correlationId: runId }),
      runId,
      workflow,
      workflowVersion: null,
      businessKey: runId,
      input: '{}',
      idempotencyKey: null,
      trigger,
      parent: null,
    });
  }

  /**
   * Reads wf.events (read_committed) from the beginning into `into` (default `events`), in a consumer group of its
   * own named after `reader` (one reader per name).
   */
  async readEvents(into: Collector<Lifecycle> = this.events, reader = 'events-reader'): Promise<void> {
    await this.codec.registerTopics([Topic.WF_EVENTS, Topic.TASK_RESULTS]);
    const c = this.ns.kafka.consumer({
      groupId: this.ns.groupId(reader),
      readUncommitted: false,
      maxWaitTimeInMs: 100,
    });
    this.consumers.push(c);
    await c.connect();
    await c.subscribe({ topic: this.codec.physical(Topic.WF_EVENTS), fromBeginning: true });
    await c.run({
      eachMessage: async ({ topic, partition, message }) => {
        const d = await this.codec.decode(Topic.WF_EVENTS, message.value, {
          topic,
          partition,
          offset: message.offset,
        });
        into.push({ event: d.event, value: d.value as unknown as Lifecycle['value'] });
      },
    });
  }

  /**
   * The first `n` records of a physical topic, read from its earliest offset in a consumer group of its own, with
   * keys and headers as text.
   * @throws AwaitTimeoutError when fewer than `n` arrive within `timeoutMs` (default 60 000)
   */
  async readRecords(
    topic: string,
    n: number,
    timeoutMs = 60_000,
  ): Promise<Array<{ key: string | null; headers: Record<string, string> }>> {
    const out: Array<{ key: string | null; headers: Record<string, string> }> = [];
    const c = this.ns.kafka.consumer({ groupId: this.ns.groupId(`read-${topic}`), maxWaitTimeInMs: 100 });
    await c.connect();
    await c.subscribe({ topic, fromBeginning: true });
    await c.run({
      eachMessage: async ({ message }) => {
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(message.headers ?? {})) headers[k] = String(v);
        out.push({ key: message.key?.toString() ?? null, headers });
      },
    });
    try {
      await eventually(`${n} records in ${topic}`, () => out.length >= n, { timeoutMs });
    } finally {
      await c.disconnect();
    }
    return out;
  }

  /**
   * A simulated worker for task types the real workers do not have: answers each command with `respond`
   * (an output, an error, or undefined to never answer), publishing TaskCompleted/TaskFailed like a worker.
   */
  async simulateWorker(
    taskTypes: string[],
    respond: (cmd: TaskCommand) => { output: unknown } | { error: string; retryable: boolean } | undefined,
    opts: {
      clockSkewMs?: number;
      /** Answers after this many ms (a slow handler). */
      delayMs?: number;
      /** Publishes a result (default: this harness's kafkajs producer), e.g. with another client or codec. */
      publish?: (topic: string, key: string, value: Buffer) => Promise<void>;
    } = {},
  ): Promise<TaskCommand[]> {
    const seen: TaskCommand[] = [];
    await this.codec.registerTopics([Topic.TASK_RESULTS, ...taskTypes.map((t) => taskTopic(t))]);
    this.producer ??= this.ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await this.producer.connect();
    const c = this.ns.kafka.consumer({
      groupId: this.ns.groupId(`sim-${taskTypes.join('-')}`),
      maxWaitTimeInMs: 100,
    });
    this.consumers.push(c);
    await c.connect();
    for (const t of taskTypes)
      await c.subscribe({ topic: this.codec.physical(taskTopic(t)), fromBeginning: true });
    await c.run({
      eachMessage: async ({ topic, partition, message }) => {
        const logical = taskTopic(topic.slice(`${this.prefix}task.`.length));
        const cmd = (
          await this.codec.decode(logical, message.value, { topic, partition, offset: message.offset })
        ).value as TaskCommand;
        seen.push(cmd);
        const r = respond(cmd);
        if (!r) return;
        if (opts.delayMs) await new Promise((resolve) => setTimeout(resolve, opts.delayMs)); // a slow handler
        const common = {
          runId: cmd.runId,
          stepId: cmd.stepId,
          taskType: cmd.taskType,
          attempt: cmd.attempt,
          idempotencyKey: cmd.idempotencyKey,
          workerId: 'sim',
        };
        const meta = (e: 'TaskCompleted' | 'TaskFailed') =>
          newMetadata(e, {
            key: cmd.runId,
            correlationId: cmd.runId,
            causationId: cmd.metadata.eventId,
            occurredAt: Date.now() + (opts.clockSkewMs ?? 0), // a worker whose clock is off
            // As a traced worker would: the result continues the command's trace (README "Tracing").
            traceparent: cmd.metadata.traceparent,
            tracestate: cmd.metadata.tracestate,
          });
        const value =
          'output' in r
            ? this.codec.encode(Topic.TASK_RESULTS, 'TaskCompleted', {
                metadata: meta('TaskCompleted'),
                ...common,
                output: JSON.stringify(r.output),
                outputRef: null,
                durationMs: 1,
                replayed: false,
              })
            : this.codec.encode(Topic.TASK_RESULTS, 'TaskFailed', {
                metadata: meta('TaskFailed'),
                ...common,
                error: {
                  errorClass: r.error,
                  message: `simulated ${r.error}`,
                  retryable: r.retryable,
                  code: null,
                  attempts: 1,
                  firstFailureAt: Date.now(),
                  lastFailureAt: Date.now(),
                },
              });
        if (opts.publish) await opts.publish(this.codec.physical(Topic.TASK_RESULTS), cmd.runId, value);
        else
          await this.producer!.send({
            topic: this.codec.physical(Topic.TASK_RESULTS),
            acks: -1,
            messages: [{ key: cmd.runId, value }],
          });
      },
    });
    return seen;
  }

  /** Events of one run, in order. */
  of(runId: string): Lifecycle[] {
    return this.events.items.filter((e) => e.value.runId === runId);
  }

  /**
   * Disconnects the consumers started so far (the wf.events readers, the simulated workers), as teardown would: for a
   * test done with them before it kills a broker, since a consumer's disconnect waits for its group's coordinator, and
   * a dead one's groups move only once the cluster fences it (about 20 s locally).
   */
  async stopConsumers(): Promise<void> {
    await Promise.allSettled(this.consumers.splice(0).map((c) => c.disconnect()));
  }

  async teardown(): Promise<void> {
    this.ns.stopRestarts();
    await Promise.all(
      this.processes.map(async (p) => {
        if (p.proc.exitCode === null && p.proc.signalCode === null) {
          p.kill('SIGKILL');
          await p.exited;
        }
      }),
    );
    await Promise.allSettled(this.consumers.map((c) => c.disconnect()));
    await this.producer?.disconnect().catch(() => undefined);
    await this.ns.cleanup();
  }
}

export async function post(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json().catch(() => ({}))) as Record<string, unknown> };
}

/**
 * Debian's Chromium (installed when missing and root), headless, driven by playwright-core. The flags keep it off the
 * network (a closed network refuses its background connections); playwright gives it a fresh profile.
 */
export async function launchChromium(): Promise<Browser> {
  const executablePath = await ensureDebianTool('chromium', 'chromium');
  const { chromium } = await import('playwright-core'); // loaded by browser tests only
  return chromium.launch({
    executablePath,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** Where browser tests save their screenshots (one PNG per page), under the repository's test-results/. */
export const SCREENSHOTS_DIR = join(ROOT, 'test-results');

/** A `keyflow` CLI run's outcome: exit code, stdout, stderr, and stdout parsed as JSON (for `--json`). */
export interface CliRun {
  code: number | null;
  out: string;
  err: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: () => any;
}

/**
 * Node's on-disk code cache (NODE_COMPILE_CACHE) for the CLI runs of the tests: each run loads some 2,000 modules,
 * and V8 compiling them again every time took about a third of a run. The cache is keyed on each file's content, so a
 * changed file is compiled afresh.
 */
const CLI_COMPILE_CACHE = join(tmpdir(), 'keyflow-test-cli-compile-cache');

let cliWarmed: Promise<void> | undefined;

/**
 * Loads the CLI's modules once in a process that ends on its own, so @swc-node/register's transform cache (on disk,
 * written asynchronously) gets its files: the CLI ends with process.exit, which drops those writes, so without this
 * every run compiled its ~160 TypeScript files again. Resolves when that process has exited, whatever its exit code:
 * a CLI that cannot load fails in the run that follows, with its own message.
 */
function warmCli(): Promise<void> {
  cliWarmed ??= new Promise<void>((resolve) => {
    const main = join(ROOT, 'apps/cli/src/main.ts');
    spawn(process.execPath, ['-r', '@swc-node/register', '-e', `require(${JSON.stringify(main)})`], {
      cwd: ROOT,
      env: { ...process.env, NODE_COMPILE_CACHE: CLI_COMPILE_CACHE },
      stdio: 'ignore',
    }).once('exit', () => resolve());
  });
  return cliWarmed;
}

/** Runs `keyflow <args>` as an operator does (the workspace's bin), with the test's environment plus `env`. */
export async function keyflowCli(args: string[], env: Record<string, string>): Promise<CliRun> {
  await warmCli();
  const child = spawn(process.execPath, [join(ROOT, 'apps/cli/bin/keyflow.js'), ...args], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'warn', NODE_COMPILE_CACHE: CLI_COMPILE_CACHE, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  return new Promise((resolve) =>
    child.once('close', (code) => resolve({ code, out, err, json: () => JSON.parse(out) })),
  );
}
