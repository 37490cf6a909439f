import { createHash, randomUUID } from 'node:crypto';
import type { Producer } from 'kafkajs';
import { newMetadata, type EventCodec } from '@keyflow/contracts';
import type { RunReadModel } from '../engine/read-model';
import type { WorkflowRegistry } from '../workflows/registry';

/** A request the API refuses: `fields` names each failing field. Maps to HTTP 400 (or 404 with `notFound`). */
export class RequestError extends Error {
  constructor(
    message: string,
    readonly fields: Array<{ path: string; message: string }> = [],
    readonly notFound = false,
  ) {
    super(message);
    this.name = 'RequestError';
  }
}

/** Publishes run requests to wf.requests (keyed by run id) and answers queries from the read model. */
export class RunsService {
  constructor(
    private readonly codec: EventCodec,
    private readonly producer: Producer,
    readonly registry: WorkflowRegistry,
    readonly readModel: RunReadModel,
  ) {}

  /**
   * Starts a run. The run id is the caller's, or derived from the Idempotency-Key (the same key for the same
   * workflow always names the same run, so a repeated start is a duplicate the engine ignores), or random.
   * @throws RequestError for an unknown workflow or version.
   */
  async start(req: {
    workflow: string;
    version?: number;
    input: Record<string, unknown>;
    businessKey?: string;
    runId?: string;
    idempotencyKey?: string;
    trigger: string;
  }) {
    const def = this.registry.get(req.workflow, req.version);
    if (!def)
      throw new RequestError(`unknown workflow ${req.workflow}${req.version ? ` v${req.version}` : ''}`, [
        { path: req.version ? 'version' : 'workflow', message: 'not registered' },
      ]);
    const runId =
      req.runId ??
      (req.idempotencyKey
        ? `run-${createHash('sha256').update(`${req.workflow}\n${req.idempotencyKey}`).digest('hex').slice(0, 32)}`
        : `run-${randomUUID()}`);
    const businessKey = req.businessKey ?? runId;
    await this.send(runId, 'StartRun', {
      runId,
      workflow: def.name,
      workflowVersion: def.version, // resolved now, so the run keeps this version even if a newer one is deployed
      businessKey,
      input: JSON.stringify(req.input),
      idempotencyKey: req.idempotencyKey ?? null,
      trigger: req.trigger,
    });
    return { runId, workflow: def.name, version: def.version, businessKey };
  }

  async cancel(runId: string, reason: string) {
    this.mustExist(runId);
    await this.send(runId, 'CancelRun', { runId, reason });
  }

  async signal(runId: string, signal: string, payload: unknown) {
    this.mustExist(runId);
    await this.send(runId, 'SignalRun', { runId, signal, payload: JSON.stringify(payload ?? null) });
  }

  async retry(runId: string, fromStepId?: string) {
    const s = this.mustExist(runId);
    if (s.status !== 'failed')
      throw new RequestError(`run ${runId} is ${s.status}; only a failed run can be retried`, [
        { path: 'status', message: s.status },
      ]);
    await this.send(runId, 'RetryRun', { runId, fromStepId: fromStepId ?? null });
  }

  private mustExist(runId: string) {
    const s = this.readModel.get(runId);
    if (!s) throw new RequestError(`run ${runId} not found`, [], true);
    return s;
  }

  private async send(
    runId: string,
    event: 'StartRun' | 'CancelRun' | 'SignalRun' | 'RetryRun',
    fields: Record<string, unknown>,
  ) {
    const value = this.codec.encode('wf.requests', event, {
      metadata: newMetadata(event, { key: runId, correlationId: runId }),
      ...fields,
    } as never);
    await this.producer.send({
      topic: this.codec.physical('wf.requests'),
      acks: -1,
      messages: [{ key: runId, value }],
    });
  }
}
