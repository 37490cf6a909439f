import { isObservable, lastValueFrom } from 'rxjs';
import { Server, type CustomTransportStrategy } from '@nestjs/microservices';
import { createBlobStore, type BlobStore } from '@keyflow/blobs';
import type { ComponentHealth, Logger, Registry } from '@keyflow/observability';
import type { AnyTaskContract } from '@keyflow/workflow';
import type { WorkerConfig } from '../config';
import type { EventPublisher } from '@keyflow/task-runtime';
import { CONTRACT_EXTRA, checkedByContract, type TaskContext, type TaskHandlerFn } from '@keyflow/handler';
import { TaskWorker, type IdempotencyHealth } from '../worker-runtime';

export {
  IDEMPOTENCY_STORE_FULL_CONDITION,
  WORKER_COMPONENTS,
  type EvictionHealth,
  type IdempotencyHealth,
} from '../worker-runtime';

/**
 * A custom transport strategy of @nestjs/microservices: NestJS handlers declared with @TaskHandler(type) (@keyflow/nestjs) consume
 * `task.<type>` topics through the worker runtime ({@link TaskWorker}: the ordered consumer, the idempotency store,
 * in-process retries, timeouts, result events on `task.results` and the DLQ). This adapter only turns Nest's
 * handlers into task handlers (checked by their contracts) and hands them to the runtime.
 */
export class KafkaTaskTransport extends Server implements CustomTransportStrategy {
  /** The worker runtime this transport starts and closes. */
  readonly worker: TaskWorker;

  constructor(
    cfg: WorkerConfig,
    log: Logger,
    registry: Registry,
    publisher?: EventPublisher,
    /** The claim-check store (default: the one the configuration selects). */
    blobs: BlobStore = createBlobStore(cfg),
  ) {
    super();
    this.worker = new TaskWorker(cfg, log, registry, publisher, blobs);
  }

  /** Parts that failed for good (see WORKER_COMPONENTS); the bootstrap exits the process on the first one. */
  get health(): ComponentHealth {
    return this.worker.health;
  }

  /** The claim-check store. */
  get blobs(): BlobStore {
    return this.worker.blobs;
  }

  /** Called with the error when the consumer dies for good: the process should exit non-zero. */
  onCrash(listener: (e: Error) => void): void {
    this.worker.onCrash(listener);
  }

  /** False before the consumer started, once it crashed, or once the result producer failed for good. */
  healthy(): boolean {
    return this.worker.healthy();
  }

  /**
   * Whether the idempotency records' Redis persists them and whether it evicts them: checked at each (re)connection.
   */
  idempotency(): IdempotencyHealth {
    return this.worker.idempotency();
  }

  stats() {
    return this.worker.stats();
  }

  async listen(callback: (err?: unknown) => void): Promise<void> {
    try {
      await this.worker.start(this.taskHandlers());
      callback();
    } catch (e) {
      callback(e);
    }
  }

  /**
   * The @TaskHandler methods Nest found (message patterns), by task type, each checked by its task contract when it
   * has one (the pattern's extras under CONTRACT_EXTRA).
   */
  private taskHandlers(): Map<string, TaskHandlerFn> {
    const handlers = new Map<string, TaskHandlerFn>();
    for (const [pattern, h] of this.getHandlers()) {
      // Nest's handler answers a value or an Observable (an interceptor's); only the latter needs rxjs.
      const run: TaskHandlerFn = async (input, ctx: TaskContext) => {
        const out: unknown = await h(input, ctx);
        return isObservable(out) ? lastValueFrom(out, { defaultValue: null }) : out;
      };
      const contract = h.extras?.[CONTRACT_EXTRA] as AnyTaskContract | undefined;
      handlers.set(pattern, contract ? checkedByContract(contract, run) : run);
    }
    return handlers;
  }

  /** SIGTERM path: stop fetching, drain in-flight tasks up to the deadline, commit, disconnect. */
  close(): Promise<void> {
    return this.worker.close();
  }

  on(): void {
    // No transport events beyond onCrash.
  }

  unwrap<T>(): T {
    return this.worker.consumer as T;
  }
}
