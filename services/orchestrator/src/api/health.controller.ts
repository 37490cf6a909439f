import { Controller, Get, Header, HttpException, Inject } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import type { Registry } from '@keyflow/observability';
import { Engine } from '../engine/engine';
import { RunReadModel } from '../engine/read-model';

export const METRICS_REGISTRY = Symbol('METRICS_REGISTRY');

@ApiExcludeController()
@Controller()
export class HealthController {
  constructor(
    @Inject(Engine) private readonly engine: Engine,
    @Inject(RunReadModel) private readonly readModel: RunReadModel,
    @Inject(METRICS_REGISTRY) private readonly registry: Registry,
  ) {}

  @Get('health')
  health() {
    const body = { partitions: this.engine.ownedPartitions(), runsKnown: this.readModel.size };
    if (!this.engine.healthy()) throw new HttpException({ status: 'unhealthy', ...body }, 503);
    return { status: 'ok', ...body };
  }

  @Get('metrics')
  @Header('content-type', 'text/plain; version=0.0.4')
  metrics(): Promise<string> {
    return this.registry.metrics();
  }
}
