import type { Consumer, Kafka } from 'kafkajs';
import type { EventCodec } from '@keyflow/contracts';
import { subscribeWhenReady } from '@keyflow/kafka';
import type { Logger } from '@keyflow/observability';
import type { RunState, RunStatus } from '@keyflow/workflow';

/** Key prefix of the barrier records the engine writes to wf.state when it takes a partition over. */
export const BARRIER_PREFIX = '__barrier__/';

export interface RunEntry {
  state: RunState;
  /** wf.state partition the snapshot came from (= the run's partition on every co-partitioned topic). */
  partition: number;
}

/**
 * The query side: every instance reads the whole compacted wf.state topic (read_committed) into memory, so any
 * instance answers for any run. It also lets the engine restore a partition it takes over: the engine writes a
 * barrier record to that partition and waits until this reader has seen it, which proves every snapshot committed
 * before it was read.
 */
export class RunReadModel {
  private readonly runs = new Map<string, RunEntry>();
  private readonly barriers = new Map<number, string>();
  private waiters: Array<{ partition: number; nonce: string; resolve: () => void }> = [];
  private consumer?: Consumer;
  snapshotsRead = 0;

  constructor(
    private readonly kafka: Kafka,
    private readonly codec: EventCodec,
    private readonly groupId: string,
    private readonly logger: Logger,
  ) {}

  async start(): Promise<void> {
    const c = this.kafka.consumer({
      groupId: this.groupId,
      readUncommitted: false,
      maxWaitTimeInMs: 100,
      sessionTimeout: 30_000,
    });
    this.consumer = c;
    await c.connect();
    await subscribeWhenReady(c, this.codec.physical('wf.state'), true);
    await c.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        const key = message.key?.toString() ?? '';
        if (message.value === null) {
          this.runs.delete(key);
          return;
        }
        let d;
        try {
          d = await this.codec.decode('wf.state', message.value, {
            topic,
            partition,
            offset: message.offset,
          });
        } catch (err) {
          this.logger.error(
            { err, topic, partition, offset: message.offset },
            'undecodable snapshot skipped by the read model',
          );
          return;
        }
        if (d.event !== 'RunSnapshot') return;
        if (key.startsWith(BARRIER_PREFIX)) {
          this.barriers.set(partition, d.value.state);
          this.waiters = this.waiters.filter((w) => {
            if (w.partition === partition && w.nonce === d.value.state) {
              w.resolve();
              return false;
            }
            return true;
          });
          return;
        }
        const state = JSON.parse(d.value.state) as RunState;
        const prev = this.runs.get(state.runId);
        if (!prev || prev.state.sequence <= state.sequence) this.runs.set(state.runId, { state, partition });
        this.snapshotsRead++;
      },
    });
  }

  async stop(): Promise<void> {
    await this.consumer?.disconnect();
  }

  /** Resolves when the barrier `nonce` written to `partition` has been read. */
  waitForBarrier(partition: number, nonce: string, timeoutMs = 60_000): Promise<void> {
    if (this.barriers.get(partition) === nonce) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`wf.state partition ${partition}: barrier not read within ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.waiters.push({
        partition,
        nonce,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      });
    });
  }

  get(runId: string): RunState | undefined {
    return this.runs.get(runId)?.state;
  }

  /** The runs whose snapshots live in `partition` (for a partition the engine takes over). */
  inPartition(partition: number): RunState[] {
    return [...this.runs.values()].filter((e) => e.partition === partition).map((e) => e.state);
  }

  /**
   * Runs filtered by workflow, status and start time (ms), newest first, `limit` per page; `cursor` is the
   * `next` of the previous page.
   */
  list(q: {
    workflow?: string;
    status?: RunStatus;
    from?: number;
    to?: number;
    limit: number;
    cursor?: string;
  }): { runs: RunState[]; next?: string } {
    const [cAt, cId] = q.cursor
      ? [Number(q.cursor.split(':')[0]), q.cursor.slice(q.cursor.indexOf(':') + 1)]
      : [Infinity, ''];
    const all = [...this.runs.values()]
      .map((e) => e.state)
      .filter((s) => (!q.workflow || s.workflow === q.workflow) && (!q.status || s.status === q.status))
      .filter(
        (s) => (q.from === undefined || s.startedAt >= q.from) && (q.to === undefined || s.startedAt < q.to),
      )
      .sort((a, b) => b.startedAt - a.startedAt || (a.runId < b.runId ? -1 : 1))
      .filter((s) => s.startedAt < cAt || (s.startedAt === cAt && s.runId > cId));
    const page = all.slice(0, q.limit);
    const last = page.at(-1);
    return { runs: page, next: all.length > q.limit && last ? `${last.startedAt}:${last.runId}` : undefined };
  }

  get size(): number {
    return this.runs.size;
  }
}
