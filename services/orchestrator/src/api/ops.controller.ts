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
  UseGuards,
} from '@nestjs/common';
import { ApiOperation, ApiQuery, ApiResponse, ApiTags } from '@nestjs/swagger';
import { z } from 'zod';
import { OpsService } from './ops.service';
import { answer, parse } from './validation';
import { Public, ApiAuthGuard, AnyScope, callerOf, type ApiCaller } from './auth';

/** Default and largest freshness of the overview's lag and DLQ figures, ms. */
export const OVERVIEW_MAX_AGE_MS = { default: 10_000, max: 600_000 } as const;

const OverviewSchema = z
  .object({
    maxAgeMs: z.coerce
      .number()
      .int()
      .min(0)
      .max(OVERVIEW_MAX_AGE_MS.max)
      .default(OVERVIEW_MAX_AGE_MS.default),
  })
  .strict();
/** A query's integer (`?partition=` with no value is refused, not read as 0). */
const queryInt = z
  .string()
  .regex(/^-?\d+$/, 'an integer')
  .transform((v) => Number(v));
const offset = z.string().regex(/^\d+$/, 'a Kafka offset (a non-negative integer, in decimal)');
const RecordsSchema = z
  .object({
    partition: queryInt.pipe(z.number().min(0)).optional(),
    offset: offset.optional(),
    key: z.string().min(1).optional(),
    errorClass: z.string().min(1).optional(),
    from: queryInt.optional(),
    to: queryInt.optional(),
    limit: queryInt.pipe(z.number().min(1).max(500)).default('50'),
    pending: z.enum(['true', 'false']).default('false'),
  })
  .strict();
const FILTER_FIELDS = ['partition', 'offset', 'key', 'errorClass', 'from', 'to'] as const;
const ActSchema = z
  .object({
    action: z.enum(['redrive', 'discard']).default('redrive'),
    partition: z.number().int().min(0).optional(),
    offset: offset.optional(),
    key: z.string().min(1).optional(),
    errorClass: z.string().min(1).optional(),
    from: z.number().int().optional(),
    to: z.number().int().optional(),
    /** Every pending record of the DLQ: must be said, so a lost filter never acts on the whole DLQ. */
    all: z.boolean().default(false),
    /** Act on at most this many records (the count the operator confirmed). */
    limit: z.number().int().min(1).optional(),
    dryRun: z.boolean().default(false),
    reason: z.string().min(1).max(1000).optional(),
    /**
     * Also redrive task commands nothing awaits (their run ended or was compensated, their step moved on, or the
     * orchestrator does not know the run): their handlers run again. Without it they are refused, with the reason.
     */
    allowRerun: z.boolean().default(false),
  })
  .strict()
  .refine((b) => b.offset === undefined || b.partition !== undefined, {
    message: 'offset needs partition (an offset alone names a record in every partition)',
    path: ['offset'],
  })
  .refine((b) => b.all !== FILTER_FIELDS.some((f) => b[f] !== undefined), {
    message:
      'give a filter (partition and offset for one record; key, errorClass, from, to) or "all": true, not both',
    path: ['all'],
  });

const filterOf = (q: {
  partition?: number;
  offset?: string;
  key?: string;
  errorClass?: string;
  from?: number;
  to?: number;
}) => ({
  partition: q.partition,
  offset: q.offset,
  key: q.key,
  errorClass: q.errorClass,
  fromMs: q.from,
  toMs: q.to,
});

/**
 * What the ops console (and scripts) read and do: lag, DLQs, chain times, topic triggers. DLQ topics by logical name.
 */
@ApiTags('ops')
@Controller('ops')
@UseGuards(ApiAuthGuard)
export class OpsController {
  constructor(@Inject(OpsService) private readonly ops: OpsService) {}

  @Get('overview')
  @ApiOperation({
    summary:
      'Lag per group and topic (queue depth per task type), oldest unread age, DLQ pending counts, runs by ' +
      'workflow and status, chain time p50/p95 per workflow (last hour), task retry counts.',
  })
  @ApiQuery({
    name: 'maxAgeMs',
    required: false,
    description: `Oldest lag/DLQ figures to accept, ms (default ${OVERVIEW_MAX_AGE_MS.default}; 0 measures now).`,
  })
  overview(@Query() query: unknown) {
    const q = parse(OverviewSchema, query);
    return answer(() => this.ops.overview(q.maxAgeMs));
  }

  @Get('triggers')
  @ApiOperation({
    summary:
      "This instance's topic triggers: per trigger its kind, source topic, consumer group, target (workflow or " +
      'signal), lag, runs in flight and maxInFlight, records held, whether reading is paused (backpressure), its DLQ ' +
      '(`dlq` physical, `dlqLogical` as the DLQ routes name it), counts since start, and per assigned source ' +
      'partition its lag, position, held records and paused flag. `{ triggers: [] }` when the instance has none.',
  })
  triggers() {
    return answer(() => this.ops.triggers());
  }

  @Get('dlq/:topic/records')
  @ApiOperation({
    summary: 'Records of a DLQ: triage headers, decoded value, ledger status (pending or handled).',
  })
  @ApiResponse({ status: 404, description: 'No such DLQ topic.' })
  records(@Param('topic') topic: string, @Query() query: unknown) {
    const q = parse(RecordsSchema, query);
    return answer(() =>
      this.ops.records(topic, { limit: q.limit, pendingOnly: q.pending === 'true', filter: filterOf(q) }),
    );
  }

  @Post('dlq/:topic/redrive')
  @HttpCode(200)
  @ApiOperation({
    summary:
      'Redrive (or, with action "discard", mark handled) the pending records of a DLQ matching the filter: ' +
      'one record with partition and offset, a set by key, error class and failure time, or all with "all": true; ' +
      'at most `limit`. dryRun counts only. A task command nothing awaits (its run ended or was compensated, its ' +
      'step moved on) is refused and listed in `refusals` with the reason, unless `allowRerun: true`. ' +
      'JSON bodies only (415 otherwise); unknown fields are refused (400).',
  })
  @ApiResponse({ status: 404, description: 'No such DLQ topic.' })
  @ApiResponse({ status: 415, description: 'Not a JSON body.' })
  act(
    @Param('topic') topic: string,
    @Body() body: unknown,
    @Headers('content-type') contentType: string | undefined,
  ) {
    // Only JSON: a form post (which any web page can send cross-site, and whose fields would not be read as the
    // filter) or a text body is refused instead of being read as an empty request.
    if (!/^application\/json\b/i.test(contentType ?? ''))
      throw new HttpException(
        { message: 'the body must be JSON (content-type: application/json)', code: 'UNSUPPORTED_MEDIA_TYPE' },
        415,
      );
    const b = parse(ActSchema, body);
    return answer(() =>
      this.ops.act(topic, {
        action: b.action === 'redrive' ? 'REDRIVEN' : 'DISCARDED',
        filter: filterOf(b),
        dryRun: b.dryRun,
        limit: b.limit,
        reason: b.reason,
        allowRerun: b.allowRerun,
      }),
    );
  }

  @Get('me')
  @AnyScope() // a key learns what it may do even without the read scope
  @ApiOperation({
    summary:
      "What the credentials sent allow: `{ authentication, name, scopes }`. With API keys, `name` is the key's name " +
      'in KEYFLOW_API_KEYS (never the key) and `scopes` its scopes (read, control); any known key may ask, whatever ' +
      'its scopes; 401 without a known key. Without keys (authentication off) `name` is null and `scopes` all of them.',
  })
  @ApiResponse({ status: 401, description: 'No API key, or an unknown one.' })
  me(@Req() req: object): ApiCaller {
    const caller = callerOf(req);
    // The guard records every caller it lets through on a route that is not public.
    if (!caller) throw new Error('GET /ops/me reached without the API guard');
    return caller;
  }

  @Get('meta')
  @Public() // constants only, needed by the console before it has a key
  @ApiOperation({
    summary: 'Constants the console shares with the engine: run statuses, the compensation suffix.',
  })
  meta() {
    return this.ops.meta();
  }
}
