import { childrenOf, flatRunState, RUN_STATUSES } from '@keyflow/workflow';
import {
  Body,
  Controller,
  Get,
  Headers,
  HttpCode,
  HttpException,
  Inject,
  Logger,
  Param,
  Post,
  Query,
  Req,
  type RawBodyRequest,
  UseGuards,
} from '@nestjs/common';
import {
  ApiBody,
  ApiHeader,
  ApiOperation,
  ApiProperty,
  ApiPropertyOptional,
  ApiQuery,
  ApiResponse,
  ApiTags,
} from '@nestjs/swagger';
import type { Request } from 'express';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { z } from 'zod';
import { SCHEDULED_RUN_PREFIX } from '../engine/scheduler';
import { RUN_CURSOR } from '../engine/run-index';
import { answer, parse } from './validation';
import { Public, ApiAuthGuard, SignedRequest } from './auth';
import { guarded, KEY_SPACES, RefusedRequest, RunsService, unknownRun } from './runs.service';
import type { RequestKeys } from './request-keys';
import { answerOnce } from './request-once';

const IDEMPOTENT_RUN_REQUEST =
  'Idempotent: the same request with the same Idempotency-Key (kept at least as long as runs are, ' +
  'ORCHESTRATOR_RUN_RETENTION_MS) gets the first answer again and is applied once; the answer names the ' +
  "request's id (`requestId`).";

/** Injection token of the webhook settings (WebhookSettings). */
export const WEBHOOKS = Symbol('WEBHOOKS');

/**
 * Webhooks as configured: off, or a Standard Webhooks verifier per workflow, and the store of delivery ids.
 * The library's tolerance for webhook-timestamp is 5 minutes either way; a delivery id is remembered longer than
 * a timestamp stays acceptable (DELIVERY_ID_TTL_MS), so a replay inside the window is refused too.
 */
export interface WebhookSettings {
  enabled: boolean;
  secrets: Record<string, string>;
  keys: RequestKeys;
}

/** Standard Webhooks' timestamp tolerance (the `standardwebhooks` library's constant), in ms. */
export const WEBHOOK_TOLERANCE_MS = 5 * 60_000;
/** How long a delivery id is remembered: past both edges of the tolerance window, plus a minute. */
export const DELIVERY_ID_TTL_MS = 2 * WEBHOOK_TOLERANCE_MS + 60_000;
export const WEBHOOK_SIGNATURE_INVALID = 'WEBHOOK_SIGNATURE_INVALID';
export const WEBHOOK_DELIVERY_SEEN = 'WEBHOOK_DELIVERY_SEEN';
export const RESERVED_RUN_ID = `the prefix ${SCHEDULED_RUN_PREFIX} is reserved for scheduled runs`;

class StartRunBody {
  @ApiProperty({ example: 'three-step' }) workflow!: string;
  @ApiPropertyOptional({ description: 'Definition version; default the latest registered.' })
  version?: number;
  @ApiProperty({ type: 'object', additionalProperties: true, example: { orderId: 'o-1' } }) input!: Record<
    string,
    unknown
  >;
  @ApiPropertyOptional({
    description: 'Entity key of the run (partition key of its task commands). Default: the run id.',
  })
  businessKey?: string;
  @ApiPropertyOptional({
    description: `Caller-chosen run id ([A-Za-z0-9_.:-], at most 128 characters, not starting with ${SCHEDULED_RUN_PREFIX}).`,
  })
  runId?: string;
}

const StartSchema = z.object({
  workflow: z.string().min(1),
  version: z.number().int().positive().optional(),
  input: z.record(z.unknown()).default({}),
  businessKey: z.string().min(1).max(256).optional(),
  runId: z
    .string()
    .regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'letters, digits and _.:- only, at most 128')
    .refine((v) => !v.startsWith(SCHEDULED_RUN_PREFIX), RESERVED_RUN_ID)
    .optional(),
});
/** Most starts one `POST /runs/batch` carries. */
export const RUN_BATCH_MAX = 1000;
/**
 * One start of a batch: a `POST /runs` body, with its Idempotency-Key as a field (empty: no key, as an empty header).
 */
const BatchItemSchema = StartSchema.extend({
  idempotencyKey: z
    .string()
    .optional()
    .transform((k) => k || undefined),
});
/** Items are checked one by one (a bad one is answered on its own), so the batch only checks that they are a list. */
const BatchSchema = z.object({ runs: z.array(z.unknown()).min(1).max(RUN_BATCH_MAX) });

/**
 * One item's answer in a `POST /runs/batch`: what `POST /runs` with that item would have answered, its HTTP status
 * as `status` and its body's fields beside it (202: the started run; 4xx/503: `message`, `code`, `errors`, ...).
 */
export type BatchItemAnswer = { status: number } & Record<string, unknown>;

const batchLogger = new Logger('RunsController');

/**
 * `POST /runs`'s answer to one item of a batch, as a value: the started run with status 202, or the refusal
 * {@link answer} would have thrown with its status. An error with no HTTP answer (a fault of this instance) is logged
 * with its stack and answered as Nest answers it for `POST /runs` (500 "Internal server error", nothing of the error
 * shown): the items before and after it still get their own answers.
 */
async function itemAnswer(start: () => Promise<object>): Promise<BatchItemAnswer> {
  try {
    return { ...(await answer(start)), status: 202 };
  } catch (e) {
    if (e instanceof HttpException) {
      const body = e.getResponse();
      return { ...(typeof body === 'string' ? { message: body } : body), status: e.getStatus() };
    }
    batchLogger.error(e, 'a batch item failed');
    return { status: 500, message: 'Internal server error' };
  }
}

const CancelSchema = z.object({ reason: z.string().min(1).max(1000).default('cancelled by API') });
const TerminateSchema = z.object({ reason: z.string().min(1).max(1000).default('terminated by API') });
const SignalSchema = z.object({ signal: z.string().min(1).max(200), payload: z.unknown().optional() });
const RetrySchema = z.object({ fromStepId: z.string().min(1).optional() });
/** Most runs one GET /runs page returns (`limit`). */
export const RUN_LIST_LIMIT_MAX = 500;
const ListSchema = z.object({
  workflow: z.string().optional(),
  status: z.enum(RUN_STATUSES).optional(),
  from: z.coerce.number().int().optional(),
  to: z.coerce.number().int().optional(),
  limit: z.coerce.number().int().min(1).max(RUN_LIST_LIMIT_MAX).default(50),
  /** The `next` of the previous page. */
  cursor: z.string().regex(RUN_CURSOR, 'a cursor: the `next` of a previous page').optional(),
});

/**
 * Checks a delivery's Standard Webhooks signature and timestamp over its raw body.
 * @throws HttpException 401 WEBHOOK_SIGNATURE_INVALID for a missing or bad signature or a stale timestamp.
 */
function verifyDelivery(verifier: Webhook, raw: Buffer, headers: Record<string, string>): void {
  try {
    verifier.verify(raw, {
      'webhook-id': headers['webhook-id'],
      'webhook-timestamp': headers['webhook-timestamp'],
      'webhook-signature': headers['webhook-signature'],
    });
  } catch (e) {
    if (!(e instanceof WebhookVerificationError)) throw e;
    throw new HttpException(
      { message: `invalid webhook signature: ${e.message}`, code: WEBHOOK_SIGNATURE_INVALID },
      401,
    );
  }
}

/**
 * A delivery's body as the run's input (an empty body is `{}`).
 * @throws HttpException 400 when it is not JSON or not a JSON object.
 */
function webhookInput(raw: Buffer): Record<string, unknown> {
  let input: unknown;
  try {
    input = JSON.parse(raw.toString('utf8') || '{}');
  } catch {
    throw new HttpException(
      { message: 'invalid request', errors: [{ path: '', message: 'body is not JSON' }] },
      400,
    );
  }
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    throw new HttpException(
      { message: 'invalid request', errors: [{ path: '', message: 'body must be a JSON object' }] },
      400,
    );
  return input as Record<string, unknown>;
}

@ApiTags('runs')
@Controller()
@UseGuards(ApiAuthGuard)
export class RunsController {
  constructor(
    @Inject(RunsService) private readonly runs: RunsService,
    @Inject(WEBHOOKS) private readonly webhooks: WebhookSettings,
  ) {
    this.verifiers = new Map(Object.entries(webhooks.secrets).map(([w, secret]) => [w, new Webhook(secret)]));
  }

  private readonly verifiers: Map<string, Webhook>;

  @Post('runs')
  @HttpCode(202)
  @ApiOperation({
    summary: 'Start a run. The same Idempotency-Key for the same workflow returns the same run.',
  })
  @ApiHeader({ name: 'Idempotency-Key', required: false })
  @ApiBody({ type: StartRunBody })
  @ApiResponse({ status: 202, description: 'Accepted: the StartRun request is durable in wf.requests.' })
  @ApiResponse({ status: 400, description: 'Invalid body; `errors` lists the failing fields.' })
  start(@Body() body: unknown, @Headers('idempotency-key') idempotencyKey?: string) {
    const b = parse(StartSchema, body);
    return answer(() => this.apiStart(b, idempotencyKey));
  }

  /** A start of the API (`POST /runs`, an item of `POST /runs/batch`): its body parsed, its Idempotency-Key. */
  private apiStart(b: z.infer<typeof StartSchema>, idempotencyKey: string | undefined) {
    return this.runs.start({
      ...b,
      input: b.input as Record<string, unknown>,
      idempotencyKey,
      trigger: 'api',
    });
  }

  @Post('runs/batch')
  @HttpCode(200)
  @ApiOperation({
    summary:
      `Start up to ${RUN_BATCH_MAX} runs in one request: each item is a POST /runs body, its Idempotency-Key as ` +
      '`idempotencyKey`. The answer lists, in the order of the items, what POST /runs would have answered each ' +
      '(`status` 202 with the run; or the refusal: 400, 422, 503 with its `code`; 500 for a fault of this ' +
      'instance). A refused item starts nothing and stops no other item. A 202 item is durable in wf.requests, as ' +
      'a POST /runs; an item sent again with its idempotencyKey gets its first answer again. The JSON body limit ' +
      '(100 KB) applies: past it, 413 and nothing started.',
  })
  @ApiBody({
    schema: {
      type: 'object',
      required: ['runs'],
      properties: {
        runs: {
          type: 'array',
          minItems: 1,
          maxItems: RUN_BATCH_MAX,
          items: {
            type: 'object',
            required: ['workflow'],
            properties: {
              workflow: { type: 'string' },
              version: { type: 'integer' },
              input: { type: 'object', additionalProperties: true },
              businessKey: { type: 'string' },
              runId: { type: 'string' },
              idempotencyKey: { type: 'string' },
            },
          },
        },
      },
    },
  })
  @ApiResponse({
    status: 200,
    description: "Every item's own answer, in order: `{ runs: [{ status, ... }] }`.",
  })
  @ApiResponse({ status: 400, description: `Not a list of 1-${RUN_BATCH_MAX} items: nothing is started.` })
  async startBatch(@Body() body: unknown): Promise<{ runs: BatchItemAnswer[] }> {
    const { runs } = parse(BatchSchema, body);
    // All at once: the BatchingProducer writes the StartRuns that are ready together in one produce request.
    return {
      runs: await Promise.all(
        runs.map((item) =>
          itemAnswer(async () => {
            const { idempotencyKey, ...b } = parse(BatchItemSchema, item);
            return this.apiStart(b, idempotencyKey);
          }),
        ),
      ),
    };
  }

  @Post('webhooks/:workflow')
  @Public() // authenticated by its Standard Webhooks signature
  @SignedRequest() // so no Origin or content-type rule: a page cannot sign
  @HttpCode(202)
  @ApiOperation({
    summary:
      'Start a run from a Standard Webhooks delivery: webhook-signature = v1,<base64 HMAC-SHA256 of ' +
      '"<webhook-id>.<webhook-timestamp>.<raw body>"> with the workflow\'s own secret.',
  })
  @ApiHeader({
    name: 'webhook-id',
    required: true,
    description: 'Delivery id; a second delivery with it is refused.',
  })
  @ApiHeader({
    name: 'webhook-timestamp',
    required: true,
    description: 'Seconds since epoch, within 5 minutes of now.',
  })
  @ApiHeader({ name: 'webhook-signature', required: true })
  @ApiResponse({
    status: 401,
    description: 'Missing or bad signature, or a timestamp outside 5 minutes: nothing is started.',
  })
  @ApiResponse({ status: 404, description: 'Webhooks off, or no secret for this workflow.' })
  @ApiResponse({
    status: 409,
    description: 'This webhook-id was delivered before (its run id is named): nothing new is started.',
  })
  async webhook(
    @Param('workflow') workflow: string,
    @Req() req: RawBodyRequest<Request>,
    @Headers() headers: Record<string, string>,
  ) {
    const verifier = this.webhookVerifier(workflow);
    const raw = req.rawBody ?? Buffer.alloc(0);
    verifyDelivery(verifier, raw, headers);
    const input = webhookInput(raw);
    const delivery = headers['webhook-id'];
    return answer(() => this.startDelivery(workflow, delivery, input));
  }

  /** @throws HttpException 404 when webhooks are off or `workflow` has no secret. */
  private webhookVerifier(workflow: string): Webhook {
    const verifier = this.webhooks.enabled ? this.verifiers.get(workflow) : undefined;
    if (!verifier)
      throw new HttpException(
        {
          message: this.webhooks.enabled
            ? `no webhook secret for workflow ${workflow}`
            : 'webhooks are disabled',
        },
        404,
      );
    return verifier;
  }

  /**
   * Starts the run of a verified delivery, once per delivery id (remembered DELIVERY_ID_TTL_MS); a start that fails
   * forgets the id again, so the sender's retry is not refused.
   * @throws RefusedRequest 409 WEBHOOK_DELIVERY_SEEN (naming the first run) for a delivery id seen before, 503
   *   STORE_UNAVAILABLE when Redis does not answer; what RunsService.start throws.
   */
  private async startDelivery(workflow: string, delivery: string, input: Record<string, unknown>) {
    const runId = this.runs.keyedRunId(workflow, delivery);
    const key = `${workflow}:${delivery}`;
    const seen = await guarded(() =>
      this.webhooks.keys.claim(
        KEY_SPACES.webhookDelivery,
        key,
        { fingerprint: '', runId },
        DELIVERY_ID_TTL_MS,
      ),
    );
    if (seen)
      throw new RefusedRequest(
        409,
        WEBHOOK_DELIVERY_SEEN,
        `webhook delivery ${delivery} was received before`,
        { runId: seen.runId },
      );
    try {
      return await this.runs.start({ workflow, input, runId, idempotencyKey: delivery, trigger: 'webhook' });
    } catch (e) {
      // Nothing started: the sender's retry with this delivery id must not be refused as seen.
      await this.webhooks.keys.release(KEY_SPACES.webhookDelivery, key).catch(() => undefined);
      throw e;
    }
  }

  @Get('runs/:id')
  @ApiOperation({ summary: 'A run: status, steps with attempts, outputs, errors, timeline.' })
  @ApiResponse({ status: 404, description: 'No such run (yet: the read model is eventually consistent).' })
  @ApiResponse({
    status: 503,
    description: 'CATCHING_UP: this instance has not read all of wf.state since it started; try again.',
  })
  get(@Param('id') id: string) {
    return answer(() => {
      const s = this.runs.readModel.get(id);
      if (!s) throw unknownRun(this.runs.readModel, id);
      // Map items listed among the steps, as `<map>[<index>]`; fields the contracts mark pii() masked. A child run
      // names its parent (`parent`); a parent lists the child runs its child steps started (`children`).
      const def = this.runs.registry.get(s.workflow, s.version);
      const children = def ? childrenOf(def, s) : [];
      return { ...this.runs.pii.run(flatRunState(s)), ...(children.length ? { children } : {}) };
    });
  }

  @Get('runs')
  @ApiOperation({
    summary:
      'Runs by workflow, status and start time (ms), newest first, paginated: `limit` (at most 500) per page, then ' +
      "`cursor` = the previous page's `next`. With a filter a page may come short (even empty) with a `next`: each " +
      'request looks at a bounded number of runs.',
  })
  @ApiQuery({ name: 'workflow', required: false })
  @ApiQuery({ name: 'status', required: false })
  @ApiQuery({ name: 'from', required: false })
  @ApiQuery({ name: 'to', required: false })
  @ApiQuery({ name: 'limit', required: false })
  @ApiQuery({ name: 'cursor', required: false })
  list(@Query() query: unknown) {
    const q = parse(ListSchema, query);
    const { runs, next } = this.runs.readModel.list(q);
    return {
      runs: runs.map((s) => ({
        runId: s.runId,
        workflow: s.workflow,
        version: s.version,
        status: s.status,
        startedAt: s.startedAt,
        endedAt: s.endedAt ?? null,
      })),
      next: next ?? null,
    };
  }

  @Post('runs/:id/cancel')
  @HttpCode(202)
  @ApiOperation({
    summary:
      'Cancel a run: its completed steps are compensated, then it ends cancelled. 409 RUN_ENDED for a run that has ended.',
    description: IDEMPOTENT_RUN_REQUEST,
  })
  @ApiHeader({ name: 'Idempotency-Key', required: false })
  cancel(@Param('id') id: string, @Body() body: unknown, @Headers('idempotency-key') key?: string) {
    const b = parse(CancelSchema, body);
    return answerOnce(this.runs, { kind: 'cancel', runId: id, key, body: b }, (requestId) =>
      this.runs.cancel(id, b.reason, false, requestId).then(() => ({ runId: id })),
    );
  }

  @Post('runs/:id/terminate')
  @HttpCode(202)
  @ApiOperation({
    summary:
      'Terminate a run: it stops at once, nothing is compensated (RunCancelled with terminated: true). 409 RUN_ENDED for a run that has ended.',
    description: IDEMPOTENT_RUN_REQUEST,
  })
  @ApiHeader({ name: 'Idempotency-Key', required: false })
  terminate(@Param('id') id: string, @Body() body: unknown, @Headers('idempotency-key') key?: string) {
    const b = parse(TerminateSchema, body);
    return answerOnce(this.runs, { kind: 'terminate', runId: id, key, body: b }, (requestId) =>
      this.runs.cancel(id, b.reason, true, requestId).then(() => ({ runId: id })),
    );
  }

  @Post('runs/:id/signal')
  @HttpCode(202)
  @ApiOperation({ summary: 'Send a signal to a run.', description: IDEMPOTENT_RUN_REQUEST })
  @ApiHeader({ name: 'Idempotency-Key', required: false })
  signal(@Param('id') id: string, @Body() body: unknown, @Headers('idempotency-key') key?: string) {
    const b = parse(SignalSchema, body);
    return answerOnce(this.runs, { kind: 'signal', runId: id, key, body: b }, (requestId) =>
      this.runs.signal(id, b.signal, b.payload, requestId).then(() => ({ runId: id })),
    );
  }

  @Post('runs/:id/retry')
  @HttpCode(202)
  @ApiOperation({
    summary: 'Retry a failed run from its failed step (or fromStepId).',
    description: IDEMPOTENT_RUN_REQUEST,
  })
  @ApiHeader({ name: 'Idempotency-Key', required: false })
  retry(@Param('id') id: string, @Body() body: unknown, @Headers('idempotency-key') key?: string) {
    const b = parse(RetrySchema, body);
    return answerOnce(this.runs, { kind: 'retry', runId: id, key, body: b }, (requestId) =>
      this.runs.retry(id, b.fromStepId, requestId).then(() => ({ runId: id })),
    );
  }
}
