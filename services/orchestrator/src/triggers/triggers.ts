import { dlqOf, triggerTopic, Topic } from '@keyflow/schemas';
import { ensureTopics, type Admin, type Kafka } from '@keyflow/kafka';
import type { EventCodec } from '@keyflow/contracts';
import { dlqTopicConfigs } from '@keyflow/ops';
import type { ComponentHealth, Logger, Registry } from '@keyflow/observability';
import { retryPolicy, backoffDelayMs, type TriggerDefinition } from '@keyflow/workflow';
import type { RunReadModel } from '../engine/read-model';
import type { WorkflowRegistry } from '../workflows/registry';
import { triggerMetrics, type TriggerMetrics } from './metrics';
import { setTimeout as sleep } from 'node:timers/promises';
import { failureCode, KeyflowError, retryableOf, textOf } from '@keyflow/errors';
import { ensureProgressTopic } from './progress';
import { TriggerRunner } from './runner';
import type { TriggerStatus, TriggerStatusSource } from './status';

/** Partitions of a trigger's own redrive topic (`trigger.<name>`): redriven records keep their key's order. */
const REDRIVE_PARTITIONS = 3;
/** Backoff of a trigger whose start failed (its source topic missing, a broker away): full jitter, 1 s to 30 s. */
const START_RETRY = retryPolicy({
  maxAttempts: Number.MAX_SAFE_INTEGER,
  initialDelayMs: 1_000,
  maxDelayMs: 30_000,
});

/** The health condition of a trigger that cannot start (`trigger:<name>`), cleared once it runs. */
export const triggerCondition = (name: string) => `trigger:${name}`;

/**
 * Names that break a rule across the application's triggers and workflows: a name given twice, a start trigger of a
 * workflow not registered here. Empty when all can run.
 */
export function triggerIssues(triggers: TriggerDefinition[], workflows: WorkflowRegistry): string[] {
  const seen = new Set<string>();
  const issues: string[] = [];
  for (const t of triggers) {
    if (seen.has(t.name)) issues.push(`trigger ${t.name}: the name is given twice`);
    seen.add(t.name);
    if (t.kind === 'start' && !workflows.get(t.workflow))
      issues.push(`trigger ${t.name}: unknown workflow ${t.workflow}`);
  }
  return issues;
}

/** What {@link TriggerRunners} needs of the orchestrator. */
export interface TriggerRunnersDeps {
  kafka: Kafka;
  codec: EventCodec;
  readModel: RunReadModel;
  logger: Logger;
  registry: Registry;
  health: ComponentHealth;
  workflows: WorkflowRegistry;
  topicPrefix: string;
  maxMessageBytes: number;
  sessionTimeoutMs: number;
  /** ORCHESTRATOR_GROUP_ID. */
  engineGroup: string;
}

/**
 * The application's topic triggers on this instance. Each starts in the background once its topics are set up and
 * its source topic exists: until then /health is degraded naming it (condition `trigger:<name>`, the error) and the
 * start is tried again with backoff, so a missing topic never stops the orchestrator nor makes it exit.
 */
export class TriggerRunners implements TriggerStatusSource {
  /** The runner of each trigger now (a start that failed is replaced by a fresh one for the next attempt). */
  private readonly runners = new Map<string, TriggerRunner>();
  private readonly metrics: TriggerMetrics;
  private admin?: Admin;
  private stopped = false;
  private requestPartitions = 1;

  constructor(
    private readonly triggers: TriggerDefinition[],
    private readonly d: TriggerRunnersDeps,
  ) {
    this.metrics = triggerMetrics(d.registry, () => this.status());
    for (const def of triggers) this.runners.set(def.name, this.runner(def));
  }

  private runner(def: TriggerDefinition): TriggerRunner {
    const d = this.d;
    return new TriggerRunner(
      def,
      {
        kafka: d.kafka,
        admin: () => this.admin,
        codec: d.codec,
        readModel: d.readModel,
        logger: d.logger,
        metrics: this.metrics,
        workflow: (name) => d.workflows.get(name),
        sessionTimeoutMs: d.sessionTimeoutMs,
        maxMessageBytes: d.maxMessageBytes,
        requestPartitions: () => this.requestPartitions,
        engineGroup: d.engineGroup,
      },
      d.topicPrefix,
    );
  }

  /**
   * Sets up the shared topics (wf.trigger-progress, each trigger's redrive topic and DLQ), then starts each trigger
   * in the background. @throws kafkajs admin or registry errors of the set-up (the orchestrator does not start)
   */
  async start(): Promise<void> {
    if (this.triggers.length === 0) return;
    const admin = this.d.kafka.admin();
    await admin.connect();
    this.admin = admin;
    await ensureProgressTopic(admin, this.d.codec);
    const meta = await admin.fetchTopicMetadata({ topics: [this.d.codec.physical(Topic.WF_REQUESTS)] });
    this.requestPartitions = meta.topics[0].partitions.length;
    const dlqConfigs = dlqTopicConfigs(this.d.maxMessageBytes);
    const replication = this.d.codec.replication(Topic.WF_REQUESTS);
    await ensureTopics(
      admin,
      this.triggers.flatMap((t) => [
        {
          topic: this.d.codec.physical(triggerTopic(t.name)),
          partitions: REDRIVE_PARTITIONS,
          ...replication,
        },
        {
          topic: this.d.codec.physical(dlqOf(triggerTopic(t.name))),
          partitions: 1,
          configs: dlqConfigs,
          ...replication,
        },
      ]),
    );
    this.d.readModel.onRunChange((s) => {
      for (const r of this.runners.values()) r.runChanged(s);
    });
    for (const def of this.triggers) void this.startOne(def);
  }

  /** Starts one trigger once its source topic exists, trying again with backoff; /health degraded meanwhile. */
  private async startOne(def: TriggerDefinition): Promise<void> {
    for (let attempt = 1; !this.stopped; attempt++) {
      const r = this.runners.get(def.name)!;
      try {
        const topics = await this.admin!.listTopics();
        if (!topics.includes(def.topic)) throw new TriggerSourceMissingError(def.name, def.topic);
        await r.start();
        this.d.health.recover(triggerCondition(def.name));
        this.d.logger.info({ trigger: def.name, topic: def.topic, group: r.group }, 'topic trigger started');
        return;
      } catch (err) {
        const message = `trigger ${def.name} cannot start: ${textOf(err)}`;
        this.d.health.degrade(triggerCondition(def.name), {
          code: failureCode(err) ?? 'TRIGGER_SOURCE_MISSING',
          error: message,
        });
        this.d.logger.warn({ err, trigger: def.name }, message);
        await r.stop().catch(() => undefined);
        this.runners.set(def.name, this.runner(def));
        await sleep(backoffDelayMs(START_RETRY, Math.min(attempt, 10)));
      }
    }
  }

  status(): TriggerStatus[] {
    return [...this.runners.values()].map((r) => r.status());
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.runners.values()].map((r) => r.stop()));
    await this.admin?.disconnect().catch(() => undefined);
  }
}

/** A trigger's source topic does not exist (yet): the trigger waits for it (retryable). */
export class TriggerSourceMissingError extends KeyflowError {
  readonly code = 'TRIGGER_SOURCE_MISSING';
  readonly retryable = retryableOf('TRIGGER_SOURCE_MISSING');
  constructor(trigger: string, topic: string) {
    super(`the source topic ${topic} of trigger ${trigger} does not exist; the trigger starts once it does`);
  }
}
