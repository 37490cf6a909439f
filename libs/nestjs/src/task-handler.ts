import { applyDecorators, UseFilters } from '@nestjs/common';
import { MessagePattern } from '@nestjs/microservices';
import { PassThroughRpcFilter } from './pass-through.filter';
import type { AnyTaskContract } from '@keyflow/workflow';
import { CONTRACT_EXTRA, type ContractHandlerMethod } from '@keyflow/handler';

const PASS_THROUGH = new PassThroughRpcFilter();

/**
 * Marks a method as the handler of a task. With a contract (`@TaskHandler(chargePayment)`), the method's input and
 * output types must match the contract's (a mismatch is a compile error: TS1241 at the decorator), the worker parses
 * each command's input with the contract's schema before the method runs (a mismatch: TaskContractError
 * INPUT_SCHEMA, not retryable, the command goes to the DLQ) and checks what it returns (TaskContractError
 * OUTPUT_SCHEMA, the step fails). With a type name (`@TaskHandler('echo')`) the input is the command's parsed JSON,
 * unchecked. The method gets the input (`@Payload()`) and a TaskContext (`@Ctx()`), and returns the output
 * (serialised to JSON). Throw NonRetryableTaskError / TaskInputError / RetryableTaskError to say what kind of
 * failure it is. The worker's transport (@keyflow/workers) runs the method: it reads the message pattern and, under
 * `CONTRACT_EXTRA` (@keyflow/handler) in its extras, the contract.
 */
export function TaskHandler<C extends AnyTaskContract>(
  contract: C,
): <M extends ContractHandlerMethod<C>>(
  target: object,
  key: string | symbol,
  descriptor: TypedPropertyDescriptor<M>,
) => void;
export function TaskHandler(taskType: string): MethodDecorator;
export function TaskHandler(task: string | AnyTaskContract): MethodDecorator {
  return applyDecorators(
    typeof task === 'string' ? MessagePattern(task) : MessagePattern(task.type, { [CONTRACT_EXTRA]: task }),
    UseFilters(PASS_THROUGH),
  );
}
