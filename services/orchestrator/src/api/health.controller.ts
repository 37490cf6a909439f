import { Controller, Get, Header, HttpException, Inject, UseGuards } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import { ComponentHealth, type Registry } from '@keyflow/observability';
import { Engine } from '../engine/engine';
import { RunReadModel } from '../engine/read-model';
import { MetricsRoute, Public, ApiAuthGuard } from './auth';

export const METRICS_REGISTRY = Symbol('METRICS_REGISTRY');

@ApiExcludeController()
@Controller()
@UseGuards(ApiAuthGuard)
export class HealthController {
  constructor(
    @Inject(Engine) private readonly engine: Engine,
    @Inject(RunReadModel) private readonly readModel: RunReadModel,
    @Inject(METRICS_REGISTRY) private readonly registry: Registry,
    @Inject(ComponentHealth) private readonly components: ComponentHealth,
  ) {}

  /**
   * 200 `{ status: 'ok', partitions, runsKnown, readModel: { snapshotsRead, snapshotsOwn, snapshotsSkipped },
   * failed: [], degraded: [] }` (`snapshotsOwn`: of those read, the states this instance's engine committed, taken
   * as they were instead of decoded again); 200 with `status: 'degraded'` while `degraded` lists conditions that stop
   * part of the work but not the process (an input or wf.state partition paused on a record batch no codec
   * decodes: code UNDECODABLE_BATCH, `error` naming topic:partition and offsets; a restart would meet the same batch;
   * or an owned partition whose inputs waited uncommitted longer than ORCHESTRATOR_PARTITION_STALL_MS: code
   * PARTITION_STALLED, id `engine/partition-<p>/stalled`, `error` naming the partition and the wait in ms); or
   * 503 with `status: 'unhealthy'` and `failed` naming each part that stopped for good (component, error, code, at
   * in ms since epoch): the engine's consumer or producer, the read model, the API's producer.
   * `degraded` also names owned runs that hold parked inputs for a workflow version this instance does not have (code
   * INPUTS_PARKED, `error` naming how many and which `workflow@version`: docs/guarantees/deploys-and-client-retries.md),
   * and, right after a start, the wf.state partitions the read model has not yet read up to where they ended when it
   * started (code CATCHING_UP: meanwhile a run it does not hold is answered 503 CATCHING_UP, not 404).
   */
  @Get('health')
  @Public()
  health() {
    const body = {
      partitions: this.engine.ownedPartitions(),
      runsKnown: this.readModel.size,
      readModel: {
        snapshotsRead: this.readModel.snapshotsRead,
        snapshotsOwn: this.readModel.snapshotsOwn,
        snapshotsSkipped: this.readModel.snapshotsSkipped,
      },
      failed: this.components.failures(),
      degraded: this.components.degraded(),
    };
    if (!this.engine.healthy() || !this.readModel.healthy() || !this.components.healthy)
      throw new HttpException({ status: 'unhealthy', ...body }, 503);
    return { status: body.degraded.length > 0 ? 'degraded' : 'ok', ...body };
  }

  @Get('metrics')
  @MetricsRoute() // public unless KEYFLOW_METRICS_AUTH (the guard checks)
  @Header('content-type', 'text/plain; version=0.0.4')
  metrics(): Promise<string> {
    return this.registry.metrics();
  }
}
