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

  /**
   * 200 `{ status: 'ok', stats, idempotency: { durable, reason }, failed: [] }` while the group member and the
   * result producer are alive; 503 with `status: 'unhealthy'` and `failed` naming what stopped for good (component,
   * error, code, at in ms since epoch), or before the consumer started. `idempotency.durable: false` (a Redis that
   * persists nothing) is reported, not unhealthy: the worker still works, with weaker redelivery guarantees.
   */
  @Get('health')
  health() {
    const body = {
      stats: this.transport.stats(),
      idempotency: this.transport.idempotency(),
      failed: this.transport.health.failures(),
    };
    if (!this.transport.healthy())
      throw new HttpException({ status: 'unhealthy', ...body }, HttpStatus.SERVICE_UNAVAILABLE);
    return { status: 'ok', ...body };
  }

  @Get('metrics')
  @Header('content-type', 'text/plain; version=0.0.4')
  metrics(): Promise<string> {
    return this.registry.metrics();
  }
}
