/**
 * What a task handler's author needs, without a framework (docs/packages.md): the TaskContext a handler gets, the
 * handler function types (`TaskHandlerFn`, untyped; `ContractHandlerMethod<C>`, typed by a task contract), the task
 * errors a handler throws to say what kind of failure it met, and `checkedByContract`, which wraps a handler with
 * its contract's input and output checks. It imports no Kafka client, no Redis client, no NestJS and no worker
 * runtime: the worker (@keyflow/workers) runs these handlers; `@TaskHandler` (NestJS) lives in @keyflow/nestjs.
 * `CONTRACT_EXTRA` is the key both read a handler's contract by.
 */
export type { TaskContext, TaskHandlerFn, ContractHandlerMethod } from './context';
export {
  TaskError,
  type TaskErrorCode,
  RetryableTaskError,
  NonRetryableTaskError,
  TaskInputError,
  TaskTimeoutError,
} from './errors';
export { checkedByContract } from './contract-check';
export { CONTRACT_EXTRA } from './pattern';
