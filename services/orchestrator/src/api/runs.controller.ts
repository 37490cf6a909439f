import { createHmac, timingSafeEqual } from 'node:crypto';
import {
  Body,
  Controller,
  Get,
  Headers,
  HttpCode,
  HttpException,
  Inject,
  Param,
  Post,
  Query,
  Req,
  type RawBodyRequest,
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
import { z } from 'zod';
import { RequestError, RunsService } from './runs.service';

export const WEBHOOK_SECRET = Symbol('WEBHOOK_SECRET');

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
  @ApiPropertyOptional({ description: 'Caller-chosen run id ([A-Za-z0-9_.:-], at most 128 characters).' })
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
    .optional(),
});
const CancelSchema = z.object({ reason: z.string().min(1).max(1000).default('cancelled by API') });
const SignalSchema = z.object({ signal: z.string().min(1).max(200), payload: z.unknown().optional() });
const RetrySchema = z.object({ fromStepId: z.string().min(1).optional() });
const ListSchema = z.object({
  workflow: z.string().optional(),
  status: z
    .enum(['running', 'waiting', 'compensating', 'completed', 'failed', 'compensated', 'cancelled'])
    .optional(),
  from: z.coerce.number().int().optional(),
  to: z.coerce.number().int().optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  cursor: z.string().optional(),
});

function parse<T>(schema: z.ZodType<T, z.ZodTypeDef, unknown>, value: unknown): T {
  const r = schema.safeParse(value ?? {});
  if (!r.success)
    throw new HttpException(
      {
        message: 'invalid request',
        errors: r.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })),
      },
      400,
    );
  return r.data;
}

async function answer<T>(f: () => Promise<T> | T): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (e instanceof RequestError)
      throw new HttpException({ message: e.message, errors: e.fields }, e.notFound ? 404 : 400);
    throw e;
  }
}

@ApiTags('runs')
@Controller()
export class RunsController {
  constructor(
    @Inject(RunsService) private readonly runs: RunsService,
    @Inject(WEBHOOK_SECRET) private readonly webhookSecret: string,
  ) {}

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
    return answer(() =>
      this.runs.start({ ...b, input: b.input as Record<string, unknown>, idempotencyKey, trigger: 'api' }),
    );
  }

  @Post('webhooks/:workflow')
  @HttpCode(202)
  @ApiOperation({
    summary:
      'Start a run from a signed webhook: X-Keyflow-Signature = sha256=<hex HMAC-SHA256 of the raw body>.',
  })
  @ApiHeader({ name: 'X-Keyflow-Signature', required: true })
  @ApiHeader({
    name: 'X-Keyflow-Delivery',
    required: false,
    description: 'Delivery id; used as the idempotency key.',
  })
  @ApiResponse({ status: 401, description: 'Missing or bad signature: nothing is started.' })
  webhook(
    @Param('workflow') workflow: string,
    @Req() req: RawBodyRequest<Request>,
    @Headers('x-keyflow-signature') signature?: string,
    @Headers('x-keyflow-delivery') delivery?: string,
  ) {
    const raw = req.rawBody ?? Buffer.alloc(0);
    const expected = Buffer.from(
      `sha256=${createHmac('sha256', this.webhookSecret).update(raw).digest('hex')}`,
    );
    const given = Buffer.from(signature ?? '');
    if (!this.webhookSecret || given.length !== expected.length || !timingSafeEqual(given, expected))
      throw new HttpException({ message: 'invalid webhook signature' }, 401);
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
    return answer(() =>
      this.runs.start({
        workflow,
        input: input as Record<string, unknown>,
        idempotencyKey: delivery,
        trigger: 'webhook',
      }),
    );
  }

  @Get('runs/:id')
  @ApiOperation({ summary: 'A run: status, steps with attempts, outputs, errors, timeline.' })
  @ApiResponse({ status: 404, description: 'No such run (yet: the read model is eventually consistent).' })
  get(@Param('id') id: string) {
    const s = this.runs.readModel.get(id);
    if (!s) throw new HttpException({ message: `run ${id} not found` }, 404);
    return s;
  }

  @Get('runs')
  @ApiOperation({
    summary: 'Runs by workflow, status and start time (ms), newest first, paginated with `cursor`.',
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
  cancel(@Param('id') id: string, @Body() body: unknown) {
    const b = parse(CancelSchema, body);
    return answer(() => this.runs.cancel(id, b.reason).then(() => ({ runId: id })));
  }

  @Post('runs/:id/signal')
  @HttpCode(202)
  signal(@Param('id') id: string, @Body() body: unknown) {
    const b = parse(SignalSchema, body);
    return answer(() => this.runs.signal(id, b.signal, b.payload).then(() => ({ runId: id })));
  }

  @Post('runs/:id/retry')
  @HttpCode(202)
  @ApiOperation({ summary: 'Retry a failed run from its failed step (or fromStepId).' })
  retry(@Param('id') id: string, @Body() body: unknown) {
    const b = parse(RetrySchema, body);
    return answer(() => this.runs.retry(id, b.fromStepId).then(() => ({ runId: id })));
  }
}
