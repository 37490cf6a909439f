import { z } from 'zod/v4';
import { KeyflowError } from '@keyflow/errors';

/**
 * Typed task contracts: a task is defined once (its type name, its input and output schema) and that one value is
 * used by the workflow definition (`.task('charge', chargePayment, { input: (c) => ... })`) and by the
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
export const TASK_TYPE = /^[A-Za-z0-9._-]{1,200}$/;

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
 * fails the same way. `issues` lists each mismatch by path and rule, not by the field's value (an unexpected key
 * is counted, not named; a record's keys do appear in paths, and a schema's own custom messages are its author's).
 */
export class TaskContractError extends KeyflowError {
  readonly retryable = false;
  constructor(
    readonly code: TaskContractErrorCode,
    readonly taskType: string,
    message: string,
    readonly issues: readonly SchemaIssue[] = [],
  ) {
    super(message);
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
  // Inputs and outputs travel as JSON: a schema JSON cannot carry (a Date, a bigint, a Map) would fail at run time
  // (or change on the way), so it is refused here. zod's JSON Schema conversion throws for exactly those.
  for (const [side, schema] of [
    ['input', spec.input],
    ['output', spec.output],
  ] as const)
    try {
      z.toJSONSchema(schema, { io: 'input' });
    } catch (e) {
      throw new TaskContractError(
        'INVALID_CONTRACT',
        spec.type,
        `task ${spec.type}: its ${side} schema cannot be carried as JSON: ${(e as Error).message}`,
      );
    }
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
  const r = safeParse(def.inputSchema, input);
  return r.success ? [] : r.issues;
}

function issuesOf(error: z.ZodError): SchemaIssue[] {
  return error.issues.map((i) => ({
    path: i.path.length ? i.path.map(String).join('.') : '(root)',
    // zod names unexpected keys in the message: they may be data (an e-mail used as a key), so only their count.
    message: i.code === 'unrecognized_keys' ? `${i.keys.length} unrecognized key(s)` : i.message,
  }));
}

/**
 * `schema.safeParse(value)`, where a schema that throws (a transform or refine that fails, an async refine in a
 * synchronous parse) is a failed parse with one issue at the root instead of an exception: the caller dead-letters
 * the value rather than failing, and retrying, the whole batch.
 */
function safeParse(
  schema: z.ZodType,
  value: unknown,
): { success: true; data: unknown } | { success: false; issues: SchemaIssue[] } {
  try {
    const r = schema.safeParse(value);
    return r.success ? { success: true, data: r.data } : { success: false, issues: issuesOf(r.error) };
  } catch (e) {
    return {
      success: false,
      issues: [{ path: '(root)', message: `the schema threw: ${(e as Error)?.message ?? String(e)}` }],
    };
  }
}

function mismatch(
  code: 'INPUT_SCHEMA' | 'OUTPUT_SCHEMA',
  contract: AnyTaskContract,
  issues: SchemaIssue[],
): TaskContractError {
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
  const r = safeParse(contract.input, input);
  if (!r.success) throw mismatch('INPUT_SCHEMA', contract, r.issues);
  return r.data as ParsedTaskInputOf<C>;
}

/**
 * Checks a handler's return value, as JSON will carry it (what later steps will read), against the contract's
 * output schema.
 * @returns the value as given (it is published as returned: nothing is dropped or rewritten).
 * @throws TaskContractError (OUTPUT_SCHEMA) listing each mismatch.
 */
export function checkTaskOutput<C extends AnyTaskContract>(contract: C, output: unknown): TaskOutputOf<C> {
  const published: unknown = output === undefined ? null : JSON.parse(JSON.stringify(output) ?? 'null');
  const r = safeParse(contract.output, published);
  if (!r.success) throw mismatch('OUTPUT_SCHEMA', contract, r.issues);
  return output as TaskOutputOf<C>;
}
