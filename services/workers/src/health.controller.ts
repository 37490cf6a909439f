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
   * 200 `{ status: 'ok', stats, idempotency: { durable, reason }, failed: [], degraded: [] }` while the group member
   * and the result producer are alive; 200 with `status: 'degraded'` while `degraded` lists conditions that stop part
   * of the work but not the process (a partition paused on a record batch no codec decodes: code UNDECODABLE_BATCH,
   * `error` naming topic:partition and offsets; see libs/kafka/src/consumer/undecodable.ts; a restart would meet the same
   * batch, so this is not a liveness failure); 503 with `status: 'unhealthy'` and `failed` naming what stopped for good (component,
   * error, code, at in ms since epoch), or before the consumer started. `idempotency.durable: false` (a Redis that
   * persists nothing) is reported, not unhealthy: the worker still works, with weaker redelivery guarantees.
   */
  @Get('health')
  health() {
    const body = {
      stats: this.transport.stats(),
      idempotency: this.transport.idempotency(),
      failed: this.transport.health.failures(),
      degraded: this.transport.health.degraded(),
    };
    if (!this.transport.healthy())
      throw new HttpException({ status: 'unhealthy', ...body }, HttpStatus.SERVICE_UNAVAILABLE);
    return { status: body.degraded.length > 0 ? 'degraded' : 'ok', ...body };
  }

  @Get('metrics')
  @Header('content-type', 'text/plain; version=0.0.4')
  metrics(): Promise<string> {
    return this.registry.metrics();
  }
}
