import { Controller, Get, Header, HttpException, HttpStatus, Inject } from '@nestjs/common';
import type { Registry } from '@keyflow/observability';
import { KafkaTaskTransport } from './transport/kafka-task.transport';

export const METRICS_REGISTRY = Symbol('METRICS_REGISTRY');

@Controller()
export class HealthController {
  constructor(
    @Inject(KafkaTaskTransport) private readonly transport: KafkaTaskTransport,
    @Inject(METRICS_REGISTRY) private readonly registry: Registry,
  ) {}

  /** 200 with consumer figures while the group member is alive; 503 once it crashed or before it started. */
  @Get('health')
  health() {
    const stats = this.transport.stats();
    if (!this.transport.healthy())
      throw new HttpException({ status: 'unhealthy', stats }, HttpStatus.SERVICE_UNAVAILABLE);
    return { status: 'ok', stats };
  }

  @Get('metrics')
  @Header('content-type', 'text/plain; version=0.0.4')
  metrics(): Promise<string> {
    return this.registry.metrics();
  }
}
