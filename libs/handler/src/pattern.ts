/**
 * The key under which a task handler's contract travels in its message pattern's extras: `@TaskHandler(contract)`
 * (@keyflow/nestjs) puts the contract there (`@nestjs/microservices`' MessagePattern, third argument), and the
 * worker's transport (@keyflow/workers) reads it back to check each command's input and the handler's output. A
 * plain string, so neither package imports the other.
 */
export const CONTRACT_EXTRA = 'keyflowContract';

/**
 * The property that marks `@TaskHandler`'s exception filter (@keyflow/nestjs), which rethrows a handler's error as
 * it is: the worker's transport calls a handler method directly, without Nest's per-call pipeline, only when that
 * filter is its one exception filter (see handlerCalls in @keyflow/workers). A registered symbol, so neither package
 * imports the other.
 */
export const PASS_THROUGH_FILTER = Symbol.for('keyflow.passThroughRpcFilter');
