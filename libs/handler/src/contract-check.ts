import { checkTaskOutput, parseTaskInput, TaskContractError, type AnyTaskContract } from '@keyflow/workflow';
import { NonRetryableTaskError, TaskInputError } from './errors';
import type { TaskHandlerFn } from './context';

/**
 * Wraps a handler with its contract's checks: the command's input is parsed with the input schema before the
 * handler runs (a mismatch is a TaskInputError with code INPUT_SCHEMA: the command goes to the DLQ with the issues
 * as triage reason, to be redriven after a fix; the handler never sees it), and the handler's return value is
 * checked against the output schema (a mismatch is a NonRetryableTaskError with code OUTPUT_SCHEMA: the step fails
 * at once, since the same code returns the same shape). Issues name paths and rules, never values. Errors the
 * handler throws pass through as they are.
 */
export function checkedByContract(contract: AnyTaskContract, handler: TaskHandlerFn): TaskHandlerFn {
  return async (input, ctx) => {
    let parsed: unknown;
    try {
      parsed = parseTaskInput(contract, input);
    } catch (e) {
      if (e instanceof TaskContractError) throw new TaskInputError(e.message, { code: e.code, cause: e });
      throw e;
    }
    const output = await handler(parsed, ctx);
    try {
      return checkTaskOutput(contract, output);
    } catch (e) {
      if (e instanceof TaskContractError)
        throw new NonRetryableTaskError(e.message, { code: e.code, cause: e });
      throw e;
    }
  };
}
