/**
 * The built-in task contracts, defined once: the workflow definitions (orchestrator) and the handlers (workers)
 * both import them, so task types, topic names (`task.<type>`) and input/output shapes have one source.
 */
import type { AnyTaskContract } from '@keyflow/workflow';
import { echo, noop } from './builtin';
import { ORDER_TASKS } from './order';
import { etlDedupe, etlExtract, etlLoad, etlReport, etlTransform } from './etl';

export * from './builtin';
export * from './order';
export * from './etl';

/** Every built-in contract, by type. */
export const BUILTIN_TASKS: ReadonlyMap<string, AnyTaskContract> = new Map(
  [noop, echo, ...ORDER_TASKS, etlExtract, etlTransform, etlDedupe, etlLoad, etlReport].map((c) => [
    c.type,
    c,
  ]),
);
