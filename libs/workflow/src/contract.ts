import { z } from 'zod/v4';

/**
 * Typed task contracts: a task is defined once (its type name, its input and output schema) and that one value is
 * used by the workflow definition (`.task('charge', { task: chargePayment, input: (c) => ... })`) and by the
 * handler (`@TaskHandler(chargePayment)`), so a misspelled task, an input mapping of the wrong shape or a handler
 * returning the wrong output is a compile error, and later steps see the step's output typed (`c.outputs.charge`).
 *
 * Schemas are zod 4 schemas (`zod/v4`, re-exported here as `z`: https://zod.dev/api). At run time the worker parses
 * each command's input with the input schema before the handler runs (a mismatch is a {@link TaskContractError}
 * with code INPUT_SCHEMA: not retryable, the command goes to the DLQ to be redriven after a fix) and checks the
 * handler's return value against the output schema (code OUTPUT_SCHEMA: the step fails, not retryable).
 */
export { z };

/** Task types name Kafka topics (`task.<type>`): Kafka's legal topic characters, at most 200 of them. */
const TASK_TYPE = /^[A-Za-z0-9._-]{1,200}$/;

/** A task's contract: what `defineTask` returns. `In`/`Out` are zod schemas of the command input and the output. */
export interface TaskContract<
  Type extends string = string,
  In extends z.ZodType = z.ZodType,
  Out extends z.ZodType = z.ZodType,
> {
  readonly type: Type;
  readonly input: In;
  readonly output: Out;
  /** One line for the catalog and the console. */
  readonly description: string;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyTaskContract = TaskContract<string, any, any>;

/** What a workflow's input mapping must produce for the task: the input schema's input type. */
export type TaskInputOf<C extends AnyTaskContract> = z.input<C['input']>;
/** What the handler receives: the input after parsing (defaults applied, unknown keys dropped). */
export type ParsedTaskInputOf<C extends AnyTaskContract> = z.output<C['input']>;
/**
 * What the handler returns and later steps see as the step's output: the output schema's input type (the worker
 * checks the value against the schema and publishes it as returned, so no field is dropped on the way).
 */
export type TaskOutputOf<C extends AnyTaskContract> = z.input<C['output']>;

/** Why a value did not match a contract: `INPUT_SCHEMA` (the command's input) or `OUTPUT_SCHEMA` (a handler's). */
export type TaskContractErrorCode = 'INPUT_SCHEMA' | 'OUTPUT_SCHEMA' | 'INVALID_CONTRACT';

/**
 * A value that does not match its task contract, or a contract that breaks a rule. Never retryable: the same value
 * fails the same way. `issues` lists each mismatch (path and message, never the value itself, so a masked field's
 * content does not leak into logs or the DLQ's triage headers).
 */
export class TaskContractError extends Error {
  readonly retryable = false;
  constructor(
    readonly code: TaskContractErrorCode,
    readonly taskType: string,
    message: string,
    readonly issues: readonly SchemaIssue[] = [],
  ) {
    super(message);
    this.name = 'TaskContractError';
  }
}

/**
 * Defines a task once, for both sides.
 *
 *   export const chargePayment = defineTask({
 *     type: 'payment.charge',
 *     input: z.object({ orderId: z.string(), amount: z.number().positive() }),
 *     output: z.object({ paymentId: z.string() }),
 *   });
 *
 * @throws TaskContractError (INVALID_CONTRACT) when the type is not a legal topic suffix (`[A-Za-z0-9._-]`, 1-200).
 */
export function defineTask<const Type extends string, In extends z.ZodType, Out extends z.ZodType>(spec: {
  type: Type;
  input: In;
  output: Out;
  description?: string;
}): TaskContract<Type, In, Out> {
  if (!TASK_TYPE.test(spec.type))
    throw new TaskContractError(
      'INVALID_CONTRACT',
      spec.type,
      `task type ${JSON.stringify(spec.type)} must match ${TASK_TYPE.source} (it names the topic task.<type>)`,
    );
  return Object.freeze({
    type: spec.type,
    input: spec.input,
    output: spec.output,
    description: spec.description ?? '',
  });
}

/** One mismatch between a value and a schema: where (dotted path, `(root)` for the value) and why. */
export interface SchemaIssue {
  path: string;
  message: string;
}

/**
 * Checks a run input against a workflow's input schema (`workflow(name, version, { input })`).
 * @returns the mismatches (empty when it matches, or when the definition has no schema). The input itself is kept
 * as sent: the check never rewrites it (no defaults filled in, no keys dropped).
 */
export function runInputIssues(def: { inputSchema?: z.ZodType }, input: unknown): SchemaIssue[] {
  if (!def.inputSchema) return [];
  const r = def.inputSchema.safeParse(input);
  return r.success ? [] : issuesOf(r.error);
}

function issuesOf(error: z.ZodError): SchemaIssue[] {
  return error.issues.map((i) => ({
    path: i.path.length ? i.path.map(String).join('.') : '(root)',
    message: i.message,
  }));
}

function mismatch(
  code: 'INPUT_SCHEMA' | 'OUTPUT_SCHEMA',
  contract: AnyTaskContract,
  error: z.ZodError,
): TaskContractError {
  const issues = issuesOf(error);
  const what = code === 'INPUT_SCHEMA' ? 'input' : 'output';
  return new TaskContractError(
    code,
    contract.type,
    `${what} of task ${contract.type} does not match its contract: ${issues
      .map((i) => `${i.path}: ${i.message}`)
      .join('; ')}`,
    issues,
  );
}

/**
 * Parses a command's input with the contract's input schema.
 * @returns the parsed input (defaults applied, unknown keys of plain objects dropped).
 * @throws TaskContractError (INPUT_SCHEMA) listing each mismatch.
 */
export function parseTaskInput<C extends AnyTaskContract>(contract: C, input: unknown): ParsedTaskInputOf<C> {
  const r = contract.input.safeParse(input);
  if (!r.success) throw mismatch('INPUT_SCHEMA', contract, r.error);
  return r.data;
}

/**
 * Checks a handler's return value against the contract's output schema.
 * @returns the value as given (it is published as returned: nothing is dropped or rewritten).
 * @throws TaskContractError (OUTPUT_SCHEMA) listing each mismatch.
 */
export function checkTaskOutput<C extends AnyTaskContract>(contract: C, output: unknown): TaskOutputOf<C> {
  const r = contract.output.safeParse(output);
  if (!r.success) throw mismatch('OUTPUT_SCHEMA', contract, r.error);
  return output as TaskOutputOf<C>;
}
