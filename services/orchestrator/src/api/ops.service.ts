import type { Kafka, Producer } from '@keyflow/kafka';
import type { PiiMasking } from './pii';
import type { EventCodec } from '@keyflow/contracts';
import type { DlqTopic } from '@keyflow/schemas';
import {
  handledBy,
  listDlqTopics,
  readDlqRecords,
  redrive,
  rerunAdmission,
  taskTypeOfTopic,
  flowKeys,
  type DlqAction,
  type DlqRecord,
  type DlqSummary,
  type RedriveFilter,
  type RedriveReport,
} from '@keyflow/ops';
import type { Logger } from '@keyflow/observability';
import type Redis from 'ioredis';
import { COMPENSATION_SUFFIX, RUN_STATUSES, TIMELINE_MAX } from '@keyflow/workflow';
import type { LagMonitor } from '../engine/lag-monitor';
import type { OrchestratorMetrics } from '../engine/metrics';
import { type RunReadModel, type WorkflowStats } from '../engine/read-model';
import { CHAIN_WINDOW_MS } from '../engine/chain-times';
import type { TriggerStatus, TriggerStatusSource } from '../triggers/status';
import { RefusedRequest } from './runs.service';

/** Who the DLQ ledger names for an action taken through the API (the ops console). */
export const CONSOLE_ACTOR = 'keyflow-console';
/** Redrive rate of the API, records per second (the CLI's default). */
export const API_REDRIVE_RATE = 100;

/** A consumer group's lag on one topic, summed over its partitions. Times in ms. */
export interface TopicLag {
  group: string;
  topic: string;
  /** The task type when the topic is a task topic (`task.<type>`), else null. */
  taskType: string | null;
  /** Records still to read (read_committed: markers and aborted records not counted). */
  lag: number;
  /** Age of the oldest record not read yet, ms; null when caught up. */
  oldestAgeMs: number | null;
  partitions: number;
}

/** Task results applied since this orchestrator started, per task type. */
export interface TaskRetryStats {
  taskType: string;
  results: number;
  /** Results of attempts after the first. */
  retries: number;
  failed: number;
}

/** What the ops console's panel shows (`GET /ops/overview`). */
export interface Overview {
  /** When the lag and DLQ figures were measured (ms since epoch), or null before the first measurement. */
  scrapedAt: number | null;
  lags: TopicLag[];
  dlqs: DlqSummary[];
  workflows: WorkflowStats[];
  tasks: TaskRetryStats[];
  /** The chain-time window, ms. */
  chainWindowMs: number;
  /** The workers' flow control by limited task type (empty without limits or a store). */
  flow: FlowStatus[];
}

/** One limited task type's flow control, cluster-wide. */
export interface FlowStatus {
  taskType: string;
  /** As the workers have them (WORKER_FLOW_LIMITS; counts, and starts per second). */
  limits: { concurrency: number; perKey: number; ratePerSec: number; keyField?: string };
  /** Handlers admitted and running now (permits held). */
  running: number;
  /** Tasks waiting for their admission (the cluster-wide line). */
  waiting: number;
}

/**
 * A topic trigger as the ops API shows it (`GET /ops/triggers`): its status, and its DLQ by the logical name the DLQ
 * routes (`/ops/dlq/:topic/...`) and the console's DLQ panel take (null when the DLQ is not under this deployment's
 * topic prefix).
 */
export type TriggerView = TriggerStatus & { dlqLogical: string | null };

/** Code of the refusal of a DLQ topic that does not exist (HTTP 404). */
export const DLQ_NOT_FOUND = 'DLQ_NOT_FOUND';

/**
 * What the ops console asks of the orchestrator: the lag/DLQ/chain-time overview, a DLQ's records, and redrive or
 * discard of one record or a filtered set. DLQ topics are named by their logical names (`task.etl.load.dlq`).
 */
export class OpsService {
  constructor(
    private readonly kafka: Kafka,
    private readonly codec: EventCodec,
    private readonly lag: LagMonitor,
    private readonly readModel: RunReadModel,
    private readonly metrics: OrchestratorMetrics,
    private readonly producer: Producer,
    private readonly logger: Logger,
    /** Masks the PII fields of the records listed (the contracts' `pii()` fields). */
    private readonly pii: PiiMasking,
    /**
     * The DLQs of this deployment's catalog (logical names: Engine.topics); the ops API acts on no other. Default: every
     * DLQ keyflow declares under the prefix (libs/ops isCatalogDlq).
     */
    private readonly declaredDlqs?: ReadonlySet<string>,
    /** The statuses of this instance's topic triggers (the trigger runners). Default: none (an empty list). */
    private readonly triggerStatus?: TriggerStatusSource,
    /** The workers' flow-control store (their WORKER_FLOW_REDIS_URL: this service's REDIS_URL). Default: no flow figures. */
    private readonly flowStore?: Redis,
  ) {}

  /**
   * The workers' flow limits and, cluster-wide, the handlers they admitted that run now and the tasks waiting
   * (see docs/workers.md "Flow control"). Empty when there is no store, no limits, or the store does not answer.
   */
  private async flow(): Promise<FlowStatus[]> {
    if (!this.flowStore) return [];
    const keys = flowKeys(this.codec.topicPrefix);
    try {
      const limits = await this.flowStore.hgetall(keys.limits);
      const now = Date.now();
      return await Promise.all(
        Object.entries(limits)
          .sort(([a], [b]) => (a < b ? -1 : 1))
          .map(async ([taskType, json]) => ({
            taskType,
            limits: JSON.parse(json) as FlowStatus['limits'],
            running: await this.flowStore!.zcount(keys.held(taskType), now, '+inf'),
            waiting: await this.flowStore!.zcard(keys.queue(taskType)),
          })),
      );
    } catch (err) {
      this.logger.warn({ err }, 'flow-control figures not read (the store did not answer)');
      return [];
    }
  }

  /** This instance's topic triggers (its share of their source partitions), as the runners see them now. */
  triggers(): { triggers: TriggerView[] } {
    return {
      triggers: (this.triggerStatus?.status() ?? []).map((t) => ({
        ...t,
        dlqLogical: this.codec.logical(t.dlq) ?? null,
      })),
    };
  }

  /**
   * The overview, its lag and DLQ figures at most `maxAgeMs` old (a lag monitor pass is run when they are older;
   * when it fails, the previous figures are returned with their `scrapedAt`).
   */
  async overview(maxAgeMs: number): Promise<Overview> {
    const report = await this.lag.fresh(maxAgeMs);
    const lags = new Map<string, TopicLag>();
    for (const l of report?.lags ?? []) {
      const id = `${l.group}\u0000${l.topic}`;
      let t = lags.get(id);
      if (!t)
        lags.set(
          id,
          (t = {
            group: l.group,
            topic: l.topic,
            taskType: taskTypeOfTopic(l.topic) ?? null,
            lag: 0,
            oldestAgeMs: null,
            partitions: 0,
          }),
        );
      t.lag += l.lag;
      t.partitions++;
      if (l.oldestAgeMs !== null) t.oldestAgeMs = Math.max(t.oldestAgeMs ?? 0, l.oldestAgeMs);
    }
    const tasks = new Map<string, TaskRetryStats>();
    for (const v of (await this.metrics.taskResults.get()).values) {
      const taskType = String(v.labels.task_type);
      let t = tasks.get(taskType);
      if (!t) tasks.set(taskType, (t = { taskType, results: 0, retries: 0, failed: 0 }));
      t.results += v.value;
      if (v.labels.retry === 'true') t.retries += v.value;
      if (v.labels.outcome === 'failed') t.failed += v.value;
    }
    return {
      scrapedAt: report?.at ?? null,
      lags: [...lags.values()],
      dlqs: report?.dlqs ?? [],
      workflows: this.readModel.workflowStats(),
      tasks: [...tasks.values()].sort((a, b) => (a.taskType < b.taskType ? -1 : 1)),
      chainWindowMs: CHAIN_WINDOW_MS,
      flow: await this.flow(),
    };
  }

  /** @throws RefusedRequest 404 DLQ_NOT_FOUND when `logicalDlq` is not an existing DLQ topic of this deployment */
  private async dlqTopic(logicalDlq: string): Promise<string> {
    const physical = this.codec.physical(logicalDlq as DlqTopic); // checked against the listed DLQs next
    if (!(await listDlqTopics(this.kafka, this.codec.topicPrefix, this.declaredDlqs)).includes(physical))
      throw new RefusedRequest(404, DLQ_NOT_FOUND, `no DLQ topic ${logicalDlq} of this deployment`);
    return physical;
  }

  /** Constants the console shares with the engine (so it does not keep copies of them). */
  meta(): { runStatuses: readonly string[]; compensationSuffix: string; timelineMax: number } {
    return { runStatuses: RUN_STATUSES, compensationSuffix: COMPENSATION_SUFFIX, timelineMax: TIMELINE_MAX };
  }

  /**
   * Up to `limit` records of a DLQ matching `filter`, decoded (PII fields masked), with what the ledger says of each.
   * @throws RefusedRequest 404 DLQ_NOT_FOUND when the DLQ topic does not exist; kafkajs errors
   */
  async records(
    logicalDlq: string,
    q: { limit: number; pendingOnly: boolean; filter: RedriveFilter },
  ): Promise<DlqRecord[]> {
    const topic = await this.dlqTopic(logicalDlq);
    const records = await readDlqRecords(this.kafka, topic, {
      limit: q.limit,
      filter: q.filter,
      pendingOnly: q.pendingOnly,
      codec: this.codec,
      handled: await this.lag.ledger.refresh(),
    });
    return records.map((r) => this.pii.dlqRecord(r));
  }

  /**
   * Redrives (or discards) at most `limit` pending records of a DLQ that match `filter` (libs/ops redrive),
   * recorded in the DLQ ledger as done by the console. After an action the overview's figures are measured again.
   * A task command is redriven only while the engine awaits it (libs/workflow rerunVerdict on the read model's view
   * of its run, the check `keyflow dlq redrive` and `keyflow replay` apply): one of a run that ended or was
   * compensated, whose step moved on, or that the orchestrator does not know, is left pending and listed in the
   * report's `refusals` (naming the run, its status and why), unless `allowRerun` says to run it again.
   * @throws RefusedRequest 404 DLQ_NOT_FOUND when the DLQ topic does not exist; what redrive throws
   */
  async act(
    logicalDlq: string,
    o: {
      action: DlqAction;
      filter: RedriveFilter;
      dryRun: boolean;
      limit?: number;
      reason?: string;
      allowRerun?: boolean;
    },
  ): Promise<RedriveReport> {
    const topic = await this.dlqTopic(logicalDlq);
    const report = await redrive(this.kafka, {
      admit: o.allowRerun
        ? undefined
        : rerunAdmission(this.codec, async (cmd) => ({ run: this.readModel.get(cmd.runId) ?? null })),
      dlqTopic: topic,
      filter: o.filter,
      ratePerSec: API_REDRIVE_RATE,
      producer: this.producer,
      logger: this.logger,
      dryRun: o.dryRun,
      action: o.action,
      limit: o.limit,
      ledger: {
        codec: this.codec,
        handledBy: handledBy(CONSOLE_ACTOR),
        reason: o.reason,
        view: this.lag.ledger,
      },
    });
    if (!o.dryRun) this.lag.invalidate();
    return {
      ...report,
      byTopic: Object.fromEntries(
        Object.entries(report.byTopic).map(([t, n]) => [this.codec.logical(t) ?? t, n]),
      ),
    };
  }
}
