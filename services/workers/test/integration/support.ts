import { join } from 'node:path';
import { Pool } from 'pg';
import type { Consumer, IHeaders, Producer } from '@keyflow/kafka';
import { EventCodec } from '@keyflow/contracts';
import type { TaskCommand, TaskCompleted, TaskFailed, TaskWaiting } from '@keyflow/schemas';
import { TestNamespace, Collector, startServiceProcess, type ServiceProcess } from '@keyflow/testing';
import { createTables, dropTables } from '../fixtures/test-handlers';
import { taskCommand, type TaskCommandOptions } from '../fixtures/task-command';
import { taskTopic } from '@keyflow/schemas';

export const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const ROOT = join(__dirname, '../../../..');

/** A worker process running test/fixtures/test-worker.ts. */
export type WorkerProcess = ServiceProcess;

/** Starts test/fixtures/test-worker.ts with `env`; `ready` rejects with "worker exited with <code> before ready". */
function startTestWorker(env: Record<string, string>): WorkerProcess {
  return startServiceProcess(join(__dirname, '../fixtures/test-worker.ts'), env, 'worker ready', {
    cwd: ROOT,
    name: 'worker',
    keepLines: Number.POSITIVE_INFINITY, // tests search a worker's whole log
  });
}

/** Everything a worker test needs: namespace, topics, a codec, PG tables, result reader, workers. */
export class WorkerHarness {
  readonly ns: TestNamespace;
  readonly prefix: string;
  readonly codec: EventCodec;
  readonly pg = new Pool({ connectionString: POSTGRES_URL, max: 4 });
  readonly table: string;
  readonly groupId: string;
  readonly workers: WorkerProcess[] = [];
  readonly results = new Collector<{
    event: 'TaskCompleted' | 'TaskFailed';
    value: TaskCompleted | TaskFailed;
    /** The result record's Kafka headers. */
    headers: IHeaders;
  }>();
  /** The TaskWaiting reports on task.results (flow-control waits), apart from the results. */
  readonly waits = new Collector<TaskWaiting>();
  private producer?: Producer;
  private resultConsumer?: Consumer;

  constructor(label: string) {
    this.ns = new TestNamespace(label);
    this.prefix = `${this.ns.prefix}.`;
    this.codec = new EventCodec({ registryUrl: this.ns.infra.schemaRegistryUrl, topicPrefix: this.prefix });
    this.table = this.ns.prefix.replace(/[^a-z0-9]/g, '_');
    this.groupId = this.ns.groupId('workers');
  }

  /** The task types set up (and consumed by the workers started here). */
  private taskTypes: string[] = [];

  async setup(taskTypes: string[], partitions = 3): Promise<void> {
    this.taskTypes = taskTypes;
    await dropTables(this.table, (s) => this.pg.query(s));
    await createTables(this.table, (s) => this.pg.query(s));
    await this.ns.createTopics(
      { name: 'task.results', numPartitions: partitions },
      ...taskTypes.flatMap((t) => [
        { name: `task.${t}`, numPartitions: partitions },
        { name: `task.${t}.dlq`, numPartitions: 1 },
      ]),
    );
    await this.codec.registerTopics(['task.results', ...taskTypes.map((t) => taskTopic(t))]);
    this.producer = this.ns.kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await this.producer.connect();
    this.resultConsumer = this.ns.kafka.consumer({ groupId: this.ns.groupId('results-reader') });
    await this.resultConsumer.connect();
    await this.resultConsumer.subscribe({ topic: this.codec.physical('task.results'), fromBeginning: true });
    await this.resultConsumer.run({
      eachMessage: async ({ topic, partition, message }) => {
        const d = await this.codec.decode('task.results', message.value, {
          topic,
          partition,
          offset: message.offset,
        });
        if (d.event === 'TaskWaiting') this.waits.push(d.value);
        else this.results.push({ ...d, headers: message.headers ?? {} } as never);
      },
    });
  }

  workerEnv(extra: Record<string, string> = {}): Record<string, string> {
    return {
      KAFKA_BROKERS: this.ns.infra.kafkaBrokers.join(','),
      SCHEMA_REGISTRY_URL: this.ns.infra.schemaRegistryUrl,
      REDIS_URL: this.ns.infra.redisUrl,
      POSTGRES_URL,
      KEYFLOW_TOPIC_PREFIX: this.prefix,
      WORKER_GROUP_ID: this.groupId,
      TEST_TABLE_PREFIX: this.table,
      WORKER_TASK_TYPES: this.taskTypes.join(','),
      WORKER_SESSION_TIMEOUT_MS: '10000',
      WORKER_HEARTBEAT_INTERVAL_MS: '1000',
      WORKER_LEASE_MS: '3000',
      WORKER_DRAIN_DEADLINE_MS: '5000',
      ...extra,
    };
  }

  async startWorker(extra: Record<string, string> = {}): Promise<WorkerProcess> {
    const w = startTestWorker(this.workerEnv(extra));
    this.workers.push(w);
    await w.ready;
    return w;
  }

  /** A task command (see {@link taskCommand}). */
  command(taskType: string, entity: string, input: object, opts: TaskCommandOptions = {}): TaskCommand {
    return taskCommand(taskType, entity, input, opts);
  }

  /**
   * Sends `commands` to their task topics, `batch` at a time, `headers` on every record, each value made by `encode`
   * (default: the harness's codec, the worker's own TaskCommand schema).
   */
  async send(
    commands: TaskCommand[],
    batch = 500,
    headers?: IHeaders,
    encode = (c: TaskCommand) => this.codec.encode(taskTopic(c.taskType), 'TaskCommand', c),
  ): Promise<void> {
    for (let i = 0; i < commands.length; i += batch) {
      const slice = commands.slice(i, i + batch);
      const byTopic = new Map<string, TaskCommand[]>();
      slice.forEach((c) => byTopic.set(c.taskType, [...(byTopic.get(c.taskType) ?? []), c]));
      await this.producer!.sendBatch({
        acks: -1,
        topicMessages: [...byTopic].map(([type, cs]) => ({
          topic: this.codec.physical(taskTopic(type)),
          messages: cs.map((c) => ({
            key: c.metadata.key,
            value: encode(c),
            headers,
          })),
        })),
      });
    }
  }

  /** Sends `commands` (of one task type) to `partition` of its task topic, whatever their keys. */
  async sendToPartition(partition: number, commands: TaskCommand[]): Promise<void> {
    if (commands.length === 0) return;
    const type = commands[0].taskType;
    await this.producer!.send({
      topic: this.codec.physical(taskTopic(type)),
      acks: -1,
      messages: commands.map((c) => ({
        key: c.metadata.key,
        partition,
        value: this.codec.encode(taskTopic(type), 'TaskCommand', c),
      })),
    });
  }

  async sendRaw(taskType: string, key: string, value: Buffer): Promise<void> {
    await this.producer!.send({
      topic: this.codec.physical(taskTopic(taskType)),
      acks: -1,
      messages: [{ key, value }],
    });
  }

  async rows<T>(sql: string, args: unknown[] = []): Promise<T[]> {
    return (await this.pg.query(sql.replace(/\{t\}/g, this.table), args)).rows as T[];
  }

  async teardown(): Promise<void> {
    await Promise.all(
      this.workers.map(async (w) => {
        if (w.proc.exitCode === null && w.proc.signalCode === null) {
          w.kill('SIGKILL');
          await w.exited;
        }
      }),
    );
    await this.resultConsumer?.disconnect();
    await this.producer?.disconnect();
    await dropTables(this.table, (s) => this.pg.query(s)).catch(() => undefined);
    await this.pg.end();
    await this.ns.cleanup();
  }
}
