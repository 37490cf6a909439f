import { Body, Controller, Get, HttpCode, HttpException, Inject, Param, Post, Query } from '@nestjs/common';
import { ApiOperation, ApiQuery, ApiResponse, ApiTags } from '@nestjs/swagger';
import { z } from 'zod';
import { OpsNotFoundError, OpsService } from './ops.service';
import { parse } from './validation';

/** Default and largest freshness of the overview's lag and DLQ figures, ms. */
export const OVERVIEW_MAX_AGE_MS = { default: 10_000, max: 600_000 } as const;

const OverviewSchema = z.object({
  maxAgeMs: z.coerce.number().int().min(0).max(OVERVIEW_MAX_AGE_MS.max).default(OVERVIEW_MAX_AGE_MS.default),
});
const offset = z.string().regex(/^\d+$/, 'a Kafka offset (a non-negative integer)');
const FilterSchema = {
  partition: z.coerce.number().int().min(0).optional(),
  offset: offset.optional(),
  key: z.string().min(1).optional(),
  errorClass: z.string().min(1).optional(),
  from: z.coerce.number().int().optional(),
  to: z.coerce.number().int().optional(),
};
const RecordsSchema = z.object({
  ...FilterSchema,
  limit: z.coerce.number().int().min(1).max(500).default(50),
  pending: z.enum(['true', 'false']).default('false'),
});
const ActSchema = z.object({
  ...FilterSchema,
  partition: z.number().int().min(0).optional(),
  from: z.number().int().optional(),
  to: z.number().int().optional(),
  action: z.enum(['redrive', 'discard']).default('redrive'),
  dryRun: z.boolean().default(false),
  reason: z.string().min(1).max(1000).optional(),
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

async function found<T>(f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (e instanceof OpsNotFoundError) throw new HttpException({ message: e.message, code: e.code }, 404);
    throw e;
  }
}

/** What the ops console (and scripts) read and do: lag, DLQs, chain times. DLQ topics by logical name. */
@ApiTags('ops')
@Controller('ops')
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
    return this.ops.overview(parse(OverviewSchema, query).maxAgeMs);
  }

  @Get('dlq/:topic/records')
  @ApiOperation({
    summary: 'Records of a DLQ: triage headers, decoded value, ledger status (pending or handled).',
  })
  @ApiResponse({ status: 404, description: 'No such DLQ topic.' })
  records(@Param('topic') topic: string, @Query() query: unknown) {
    const q = parse(RecordsSchema, query);
    return found(() =>
      this.ops.records(topic, { limit: q.limit, pendingOnly: q.pending === 'true', filter: filterOf(q) }),
    );
  }

  @Post('dlq/:topic/redrive')
  @HttpCode(200)
  @ApiOperation({
    summary:
      'Redrive (or, with action "discard", mark handled) the pending records of a DLQ matching the filter: ' +
      'one record with partition and offset, or a set by key, error class and failure time. dryRun counts only.',
  })
  @ApiResponse({ status: 404, description: 'No such DLQ topic.' })
  act(@Param('topic') topic: string, @Body() body: unknown) {
    const b = parse(ActSchema, body);
    return found(() =>
      this.ops.act(topic, {
        action: b.action === 'redrive' ? 'REDRIVEN' : 'DISCARDED',
        filter: filterOf(b),
        dryRun: b.dryRun,
        reason: b.reason,
      }),
    );
  }
}
