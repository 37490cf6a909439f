import type { AnyTaskContract, WorkflowDefinition } from '@keyflow/workflow';
import { echo, noop, testWorkflows } from '@keyflow/testing';
import { ORDER_TASKS, orderSaga } from '@keyflow/example-order-saga';
import { ETL_TASKS, geonamesEtl } from '@keyflow/example-geonames-etl';

/**
 * Every workflow this folder's orchestrator registers: the test workflows (`three-step`, `fan-out`), the order
 * saga and the GeoNames ETL (what an orchestrator registered by itself before the examples left the platform).
 */
export const allWorkflows: readonly WorkflowDefinition[] = [...testWorkflows, orderSaga, geonamesEtl];
/** The same, under the name `keyflow rebuild --definitions <module>` reads. */
export const workflows = allWorkflows;

/** Every task contract those workflows use, by type (each type one task topic). */
export const ALL_TASKS: ReadonlyMap<string, AnyTaskContract> = new Map(
  [noop, echo, ...ORDER_TASKS, ...ETL_TASKS].map((c) => [c.type, c]),
);
