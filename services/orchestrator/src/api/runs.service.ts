import { createHash, randomUUID } from 'node:crypto';
import { newMetadata, type EventCodec } from '@keyflow/contracts';
import type { BatchingProducer } from '@keyflow/kafka';
import { traceContextOf, traceHeaders } from '@keyflow/observability';
import {
  RUN_ENDED,
  runInputIssues,
  SIGNAL_BUFFER_FULL,
  TERMINAL,
  type WorkflowDefinition,
} from '@keyflow/workflow';
import { PiiMasking } from './pii';
import { fingerprint, type RequestKeys } from './request-keys';
import type { RunReadModel } from '../engine/read-model';
import type { WorkflowRegistry } from '../workflows/registry';
import { KeyflowError, type ErrorCode } from '@keyflow/errors';
import { Topic } from '@keyflow/schemas';

/**
 * A request the API refuses: `fields` names each failing field. Maps to HTTP 400 (or 404 with `notFound`); the
 * subclass RefusedRequest carries another status, a code and more of the answer.
 */
export class RequestError extends KeyflowError {
  readonly code: ErrorCode = 'INVALID_REQUEST';
  readonly retryable: boolean = false;
  constructor(
    message: string,
    readonly fields: Array<{ path: string; message: string }> = [],
    readonly notFound = false,
  ) {
    super(message);
  }
}

/** A refusal with its own HTTP status and code; `details` are merged into the answer's body. */
export class RefusedRequest extends RequestError {
  override readonly code: ErrorCode;
  override readonly retryable: boolean;
  constructor(
    readonly status: 401 | 404 | 409 | 422 | 429 | 503,
    code: ErrorCode,
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
    this.name = 'RefusedRequest';
    this.code = code;
    this.retryable = status === 503;
  }
}

/** The 202 answer of a start: the run's id, workflow, the version it runs and its business key. */
export interface StartedRun {
  runId: string;
  workflow: string;
  version: number;
  businessKey: string;
}

/** A start as the API, a webhook or a schedule asks for it (see {@link RunsService.start}). */
export interface StartRunRequest {
  workflow: string;
  /** Default: the latest registered. */
  version?: number;
  input: Record<string, unknown>;
  businessKey?: string;
  runId?: string;
  idempotencyKey?: string;
  /** `api`, `webhook` or `schedule`: only an `api` start binds its Idempotency-Key in Redis. */
  trigger: string;
}

export const IDEMPOTENCY_KEY_REUSED = 'IDEMPOTENCY_KEY_REUSED';
export const CATCHING_UP = 'CATCHING_UP';

/**
 * The answer for a run the read model does not hold: 404 once it has read all of wf.state that was committed before
 * it started; before that (an instance just started or restarted, e.g. in a rolling deploy) the run may well exist,
 * so 503 CATCHING_UP, retryable, never a 404 a client would take as final.
 */
export function unknownRun(
  readModel: Pick<RunReadModel, 'caughtUp' | 'catchingUp'>,
  runId: string,
): RequestError {
  if (readModel.caughtUp()) return new RequestError(`run ${runId} not found`, [], true);
  return new RefusedRequest(
    503,
    CATCHING_UP,
    `run ${runId} is not known yet: this instance is still reading wf.state (partitions ${readModel.catchingUp().join(', ')}); try again`,
  );
}
export const STORE_UNAVAILABLE = 'STORE_UNAVAILABLE';
/** Redis key spaces of RequestKeys. */
export const KEY_SPACES = {
  idempotency: 'idempotency',
  webhookDelivery: 'webhook-delivery',
  /** Idempotency-Keys of run requests (signal, cancel, terminate, retry): see api/request-once.ts. */
  runRequest: 'run-request',
} as const;

/** Runs a RequestKeys call; Redis failing is a 503 (retryable), never a run started unguarded. */
export async function guarded<T>(f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    throw new RefusedRequest(
      503,
      STORE_UNAVAILABLE,
      `the request key store (Redis) did not answer: ${(e as Error).message}`,
    );
  }
}

/**
 * Publishes run requests to wf.requests (keyed by run id) and answers queries from the read model. Requests that
 * arrive while a produce is in flight share the next one (`BatchingProducer`: acks=all, idempotent producer, order
 * per partition kept), so concurrent requests do not queue one round trip each; each caller still waits for its
 * own record's acknowledgement before its 202.
 */
export class RunsService {
  constructor(
    private readonly codec: EventCodec,
    private readonly producer: BatchingProducer,
    readonly registry: WorkflowRegistry,
    readonly readModel: RunReadModel,
    /** The API's Idempotency-Keys (Redis), shared by every instance. */
    readonly keys: RequestKeys,
    /** `idempotencyKeyTtlMs`: how long a key stays bound, ms (config.ts requestKeyTtlMs: at least the run retention). */
    readonly settings: { idempotencyKeyTtlMs: number; signalBufferLimit: number },
  ) {
    this.pii = new PiiMasking(registry);
  }

  /** Masks the PII fields of the views the API shows (run views, DLQ records). */
  readonly pii: PiiMasking;

  /**
   * Starts a run. The run id is the caller's, or derived from the Idempotency-Key (the same key for the same
   * workflow always names the same run, so a repeated start is a duplicate the engine ignores), or random.
   * An Idempotency-Key (trigger `api`) is bound in Redis, before the StartRun is written, to the fingerprint of
   * the request (workflow, version, input, businessKey, runId) and its run for requestKeyTtlMs (config.ts), then,
   * once the StartRun is written, to that answer: the same request again gets the same run and, once answered, is
   * not sent again (its run may have ended and been forgotten meanwhile); another request with the key is refused.
   * @throws RequestError for an unknown workflow or version; RefusedRequest 422 IDEMPOTENCY_KEY_REUSED (naming
   *   both fingerprints and the first run) for a key bound to another request, 503 STORE_UNAVAILABLE when Redis
   *   does not answer.
   */
  async start(req: StartRunRequest): Promise<StartedRun> {
    // The input as the StartRun carries it, serialised once for the input check and the record alike.
    const input = JSON.stringify(req.input ?? {});
    const def = this.definitionOf(req, input);
    const keyed = req.idempotencyKey && req.trigger === 'api';
    // Only a bound key needs the request's fingerprint (a SHA-256 of its canonical JSON): not computed otherwise.
    const fp = keyed
      ? fingerprint({
          workflow: req.workflow,
          version: req.version,
          input: req.input,
          businessKey: req.businessKey,
          runId: req.runId,
        })
      : '';
    // A keyed run's id names the key and the request: after the key's TTL, the same key with another request is a
    // new run rather than a duplicate start the engine would drop.
    const runId =
      req.runId ??
      (req.idempotencyKey
        ? this.keyedRunId(req.workflow, keyed ? `${req.idempotencyKey}\n${fp}` : req.idempotencyKey)
        : `run-${randomUUID()}`);
    const businessKey = req.businessKey ?? runId;
    const keyName = `${def.name}:${req.idempotencyKey}`;
    let claimed = false;
    if (keyed) {
      const bound = await this.claimKey(keyName, req.idempotencyKey!, fp, runId);
      // The first request with this key was written (its answer stored): its run may be over and forgotten
      // (ORCHESTRATOR_RUN_RETENTION_MS) while the key lives, so a StartRun sent again would run it a second time.
      if (bound?.answer) return bound.answer.body as StartedRun;
      claimed = !bound;
    }
    try {
      await this.send(runId, 'StartRun', {
        runId,
        workflow: def.name,
        workflowVersion: def.version, // resolved now, so the run keeps this version even if a newer one is deployed
        businessKey,
        input,
        idempotencyKey: req.idempotencyKey ?? null,
        trigger: req.trigger,
        parent: null,
      });
    } catch (e) {
      // Not written: free the key, so a retry with it (or another request) is not held to a run that never was.
      if (claimed) await this.keys.release(KEY_SPACES.idempotency, keyName).catch(() => undefined);
      throw e;
    }
    const started: StartedRun = { runId, workflow: def.name, version: def.version, businessKey };
    if (keyed)
      await this.keys
        .settle(KEY_SPACES.idempotency, keyName, {
          fingerprint: fp,
          runId,
          answer: { status: 202, body: started },
        })
        // Not stored: a repeat sends the StartRun again, a duplicate while the run is held (DUPLICATE_START).
        .catch(() => undefined);
    return started;
  }

  /**
   * The definition a start asks for, its input checked as the engine will check it.
   * @throws RequestError for an unknown workflow or version, or an input its input schema refuses.
   */
  private definitionOf(req: StartRunRequest, input: string): WorkflowDefinition {
    const def = this.registry.get(req.workflow, req.version);
    if (!def)
      throw new RequestError(`unknown workflow ${req.workflow}${req.version ? ` v${req.version}` : ''}`, [
        { path: req.version ? 'version' : 'workflow', message: 'not registered' },
      ]);
    // What the engine will check: the input as the StartRun's JSON carries it (a schedule's input is code).
    const issues = def.inputSchema ? runInputIssues(def, JSON.parse(input)) : [];
    if (issues.length)
      throw new RequestError(
        `input does not match workflow ${def.name} v${def.version}'s input schema`,
        issues.map((i) => ({ path: i.path === '(root)' ? 'input' : `input.${i.path}`, message: i.message })),
      );
    return def;
  }

  /**
   * Binds Idempotency-Key `keyName` (`<workflow>:<key>`) to the request's fingerprint `fp` and `runId`, unless bound.
   * @returns the binding it had (undefined: claimed now), of this same request.
   * @throws RefusedRequest 422 IDEMPOTENCY_KEY_REUSED when bound to another request, 503 STORE_UNAVAILABLE.
   */
  private async claimKey(keyName: string, idempotencyKey: string, fp: string, runId: string) {
    const bound = await guarded(() =>
      this.keys.claim(
        KEY_SPACES.idempotency,
        keyName,
        { fingerprint: fp, runId },
        this.settings.idempotencyKeyTtlMs,
      ),
    );
    if (bound && bound.fingerprint !== fp)
      throw new RefusedRequest(
        422,
        IDEMPOTENCY_KEY_REUSED,
        `Idempotency-Key ${idempotencyKey} was used for another request (run ${bound.runId}); nothing was started`,
        {
          idempotencyKey,
          runId: bound.runId,
          fingerprints: { stored: bound.fingerprint, request: fp },
        },
      );
    return bound;
  }

  /** The run id an Idempotency-Key (or a webhook delivery id) names for a workflow: `run-<32 hex>`. */
  keyedRunId(workflow: string, key: string): string {
    return `run-${createHash('sha256').update(`${workflow}\n${key}`).digest('hex').slice(0, 32)}`;
  }

  /**
   * Cancels a run: its completed steps are compensated, then it ends `cancelled`. With `terminate` it stops at once,
   * compensating nothing (RunCancelled says `terminated: true`).
   * @throws RefusedRequest 409 RUN_ENDED (with the run's `status`) when the read model shows the run completed,
   *   compensated or cancelled: the engine would ignore the request (reducer reason RUN_ENDED). A `failed` run is not
   *   refused: a retry just sent may be running it again before the read model shows it. A run that ends after this
   *   check is ignored the same way.
   * @param requestId the CancelRun's event id (api/request-once.ts: derived from an Idempotency-Key): the engine
   *   applies one id once per run (DUPLICATE_REQUEST). Default random.
   */
  async cancel(runId: string, reason: string, terminate = false, requestId?: string) {
    const s = this.mustExist(runId);
    if (TERMINAL.has(s.status) && s.status !== 'failed')
      throw new RefusedRequest(
        409,
        RUN_ENDED,
        `run ${runId} has ended (${s.status}); nothing to ${terminate ? 'terminate' : 'cancel'}`,
        { status: s.status },
      );
    await this.send(
      runId,
      'CancelRun',
      { runId, reason, terminate, compensateCompleted: false, reportTo: null },
      requestId,
    );
  }

  /**
   * Sends a signal. A run holds at most ORCHESTRATOR_SIGNAL_BUFFER_LIMIT distinct signals it does not wait for yet.
   * @throws RefusedRequest 429 SIGNAL_BUFFER_FULL (naming the limit) when this one would go past it (the engine
   *   refuses it too, by the same limit, if it gets there by another path or before the read model caught up).
   * @param requestId the SignalRun's event id, as for {@link cancel}.
   */
  async signal(runId: string, signal: string, payload: unknown, requestId?: string) {
    const s = this.mustExist(runId);
    const step = this.registry.get(s.workflow, s.version)?.stepIndex.get(s.plan[s.position] ?? '');
    const awaited = s.status === 'waiting' && step?.kind === 'wait' && step.signal === signal;
    const held = Object.keys(s.signals ?? {}).length;
    const limit = this.settings.signalBufferLimit;
    if (!awaited && !(signal in (s.signals ?? {})) && held >= limit)
      throw new RefusedRequest(
        429,
        SIGNAL_BUFFER_FULL,
        `run ${runId} already buffers ${held} signals it does not wait for (limit ${limit}, ORCHESTRATOR_SIGNAL_BUFFER_LIMIT); ${signal} was not sent`,
        { limit },
      );
    await this.send(
      runId,
      'SignalRun',
      { runId, signal, payload: JSON.stringify(payload ?? null) },
      requestId,
    );
  }

  /**
   * Retries a failed run from its failed step (or `fromStepId`); the run's timeout is armed again.
   * @param requestId the RetryRun's event id, as for {@link cancel}.
   * @throws RequestError 404 for an unknown run, 400 for a run that is not `failed`.
   */
  async retry(runId: string, fromStepId?: string, requestId?: string) {
    const s = this.mustExist(runId);
    if (s.status !== 'failed')
      throw new RequestError(`run ${runId} is ${s.status}; only a failed run can be retried`, [
        { path: 'status', message: s.status },
      ]);
    await this.send(runId, 'RetryRun', { runId, fromStepId: fromStepId ?? null }, requestId);
  }

  private mustExist(runId: string) {
    const s = this.readModel.get(runId);
    if (!s) throw unknownRun(this.readModel, runId);
    return s;
  }

  private async send(
    runId: string,
    event: 'StartRun' | 'CancelRun' | 'SignalRun' | 'RetryRun',
    fields: Record<string, unknown>,
    /** The record's event id (a run request's id: the engine applies one id once per run); default random. */
    eventId?: string,
  ) {
    // The request's span (api/tracing.ts) is the active one: the run's trace starts from it. Injected once, for the
    // metadata and the headers alike.
    const traceContext = traceContextOf();
    const value = this.codec.encode(Topic.WF_REQUESTS, event, {
      metadata: newMetadata(event, { key: runId, correlationId: runId, eventId, ...traceContext }),
      ...fields,
    } as never);
    await this.producer.send(this.codec.physical(Topic.WF_REQUESTS), {
      key: runId,
      value,
      headers: traceHeaders(traceContext) ?? {},
    });
  }
}
