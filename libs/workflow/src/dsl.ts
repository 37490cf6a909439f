import { retryPolicy, type RetryPolicy, type RetryPolicyInput } from './retry';
import type { AnyTaskContract, TaskInputOf, TaskOutputOf } from './contract';
import type { z } from 'zod/v4';
import { KeyflowError, retryableOf } from '@keyflow/errors';

/** Suffix of a compensation's step id (`<step>.compensate`); no step of a definition may use it. */
export const COMPENSATION_SUFFIX = '.compensate';
/**
 * The workflow definition DSL. Definitions are TypeScript values, named and versioned; a run keeps the version it
 * started with. Steps run in sequence; step kinds: task, choice, map (parallel fan-out and fan-in), wait.
 *
 * Typed (task contracts, see `defineTask`): the step's task is a contract, its input mapping must produce the
 * contract's input, and later steps see its output typed:
 *
 *   const order = workflow('order', 1, { input: z.object({ orderId: z.string(), amount: z.number() }) })
 *     .task('reserve', reserveInventory, { compensate: { task: releaseInventory } })
 *     .task('charge', chargePayment, { input: (c) => ({ orderId: c.input.orderId, amount: c.input.amount }) })
 *     .task('ship', createShipment, { input: (c) => ({ paymentId: c.outputs.charge.paymentId }) })
 *     .build();
 *
 * Untyped (a task type by name; inputs and outputs are `unknown`):
 *
 *   workflow('order', 1).task('reserve', { type: 'inventory.reserve', compensate: { type: 'inventory.release' } })
 */

/**
 * What input mappings and conditions see: the run input and the outputs of completed steps, by step id. Frozen
 * (deeply): a function that changes what it is given throws a TypeError, and that input is dead-lettered with it
 * (the run's state is shared between the engine's copies of it; a change would leak into the committed state).
 * `I` is the run input's type, `O` the outputs of the steps before this one (typed for contract steps).
 */
export interface StepContext<I = Record<string, unknown>, O = Record<string, unknown>> {
  runId: string;
  businessKey: string;
  input: I;
  outputs: O;
}

/** Default step timeout of a child step (`.child`, `.childMap`): 24 hours. */
export const CHILD_STEP_TIMEOUT_MS = 24 * 60 * 60 * 1000;

/** Options of a child step's retries and timeout. */
export interface ChildPolicyOptions {
  /**
   * The parent's retry policy for the step: a failed child (its error class and retryable flag are the step's
   * error's) is retried with a new child run (`<parent>~<step>~<attempt>`).
   */
  retry?: RetryPolicyInput;
  /**
   * How long the step waits for the child's end, in ms (default {@link CHILD_STEP_TIMEOUT_MS}); then the child is
   * cancelled and the attempt fails (StepTimeoutError, retryable).
   */
  stepTimeoutMs?: number;
}

/** Options of a child step (`.child(id, definition, { ... })`); `CI` is the child's run input. */
export type ChildOptions<I, O, CI, R = CI> = ChildPolicyOptions & {
  /** The child run's business key (default `<parent business key>/<step id>`). */
  businessKey?: (c: StepContext<I, O>) => string;
  /**
   * Saga compensation: when a later step of the parent fails for good (or the parent is cancelled), the completed
   * child run is asked to compensate its own completed steps (in reverse order; it then ends cancelled), and the
   * parent's compensation of this step waits for that to end. Default false: a completed child is left as it is.
   */
  compensate?: boolean;
} & InputMapping<[c: StepContext<I, O>], I, CI, R>;

/** Options of a child map (`.childMap`): each item starts one child run; `CO` is the child's run output. */
export type ChildMapOptions<I, O, CI, CO, Item, A, R = CI> = ChildPolicyOptions & {
  /** The items to fan out over (each becomes one child run). Must be deterministic. */
  items: (c: StepContext<I, O>) => Item[];
  /** An item's child run input (must be deterministic). */
  input: (item: Item, index: number, c: StepContext<I, O>) => NoExtra<R, CI>;
  /** An item's child business key (default `<businessKey>/<index>`). */
  businessKey?: (item: Item, index: number, c: StepContext<I, O>) => string;
  /** Children running at once (default 10). */
  concurrency?: number;
  /** Fan-in: the step's output from the children's outputs, in item order (default: the array). */
  aggregate?: (outputs: CO[]) => A;
  /**
   * Saga compensation, as `.child`'s: when the parent's saga compensates this step, each completed item's child run
   * is asked to compensate its own completed steps (up to `concurrency` children at once; each ends cancelled), and
   * the parent's saga goes on once every one has reported. Items that never completed are cancelled instead. Default
   * false: completed children are left as they are.
   */
  compensate?: boolean;
};

/** Retry and timeout options of a task or map step. */
export interface StepPolicyOptions {
  /** Orchestrator-level retry policy: attempts, backoff with full jitter, non-retryable error classes. */
  retry?: RetryPolicyInput;
  /** Per-attempt timeout the worker enforces, in ms (default 30 000). */
  timeoutMs?: number;
  /**
   * Step timeout in ms: if no result arrives this long after an attempt is scheduled, the attempt counts as failed
   * (retryable, error class StepTimeoutError). Default: timeoutMs * workerAttempts + 30 000.
   */
  stepTimeoutMs?: number;
  /** Attempts the worker may make in process before reporting (default 1: retries are the orchestrator's). */
  workerAttempts?: number;
}

/** Options of an untyped task step (`.task(id, { type, ... })`). */
export interface TaskOptions<
  I = Record<string, unknown>,
  O = Record<string, unknown>,
> extends StepPolicyOptions {
  /** Task type: commands go to `task.<type>`. */
  type: string;
  /** Input from the run input and earlier outputs (default: the run input). Must be deterministic. */
  input?: (c: StepContext<I, O>) => unknown;
  /** Partition key of the command (default: the run's business key), so one entity's tasks stay in order. */
  entityKey?: (c: StepContext<I, O>) => string;
  /** Saga compensation, run if a later step fails for good. Input default: `{ input, output }` of this step. */
  compensate?: {
    type: string;
    input?: (c: StepContext<I, O & Record<string, unknown>>) => unknown;
    retry?: RetryPolicyInput;
    timeoutMs?: number;
  };
}

/**
 * An input mapping from `Ctx` that must produce `In`: optional when the default (`Default`: the run input, a map's
 * item) already has that type, required otherwise (so a run input of the wrong shape is a compile error, not a
 * DLQ entry).
 */
export type InputMapping<Ctx extends unknown[], Default, In, R = In> =
  DefaultFits<Default, In> extends true
    ? { input?: (...c: Ctx) => NoExtra<R, In> }
    : { input: (...c: Ctx) => NoExtra<R, In> };

/**
 * `R` with every key `In` does not name typed `never`: a mapping that returns a field its task does not declare
 * (a misspelled optional field, which the worker's parse would otherwise drop) fails to compile (TS2322). An
 * input of any shape (`unknown`) takes every key.
 */
export type NoExtra<R, In> = unknown extends In ? R : R & { [K in Exclude<keyof R, keyof In>]: never };

/**
 * Whether a default value of type `Default` can stand for an input of type `In`: always for an input of any shape
 * (`unknown`); never for an untyped run input (an index signature, as `workflow()` without an input schema gives),
 * whose fields nothing checks; otherwise when the types are assignable.
 */
export type DefaultFits<Default, In> = unknown extends In
  ? true
  : string extends keyof Default
    ? false
    : [Default] extends [In]
      ? true
      : false;

/** `A | B` as `A & B` (the outputs of every branch of a choice, each optional after it). */
export type UnionToIntersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer X) => void
  ? X
  : never;

/** The outputs after a choice branch's steps. */
export type BranchOutputs<Br> = Br extends { steps: (b: never) => StepsBuilder<never, infer X> } ? X : never;

/** The outputs before the first step: none. */
export type NoOutputs = Record<never, never>;

/** Outputs after a step `Id` whose output is `T`. */
export type WithOutput<O, Id extends string, T> = O & { [P in Id]: T };

/** Compensation of a typed step: another contract; its input defaults to `{ input, output }` of the step. */
export type ContractCompensation<I, O, Undo extends AnyTaskContract, Default> = {
  task: Undo;
  retry?: RetryPolicyInput;
  timeoutMs?: number;
} & InputMapping<[c: StepContext<I, O>], Default, TaskInputOf<Undo>>;

/** Options of a typed task step (`.task(id, contract, { ... })`). */
export type ContractTaskOptions<
  I,
  O,
  Id extends string,
  C extends AnyTaskContract,
  Undo extends AnyTaskContract,
  R = TaskInputOf<C>,
> = StepPolicyOptions & {
  /** Partition key of the command (default: the run's business key), so one entity's tasks stay in order. */
  entityKey?: (c: StepContext<I, O>) => string;
  /**
   * Saga compensation, run if a later step fails for good, and also for this step itself when it was dead-lettered,
   * timed out or was outstanding at a cancel or run timeout: its output may then be missing (hence optional here).
   */
  compensate?: ContractCompensation<
    I,
    O & { [P in Id]?: TaskOutputOf<C> },
    Undo,
    { input: TaskInputOf<C>; output: TaskOutputOf<C> | null }
  >;
} & InputMapping<[c: StepContext<I, O>], I, TaskInputOf<C>, R>;

/** Default per-attempt timeout of a local step (`.local`), in ms: local steps are short by rule. */
export const LOCAL_TIMEOUT_MS = 5_000;
/** What a local step's default step timeout adds to its attempt timeout, in ms (recovery after a crash waits it). */
export const LOCAL_STEP_TIMEOUT_GRACE_MS = 5_000;

/** Retry and timeout options of a local step (`.local`): no in-process attempts beyond one, no compensation. */
export interface LocalPolicyOptions {
  /** Orchestrator-level retry policy (each retry runs the handler again locally, at least once). */
  retry?: RetryPolicyInput;
  /** Per-attempt timeout in ms (default {@link LOCAL_TIMEOUT_MS}). */
  timeoutMs?: number;
  /**
   * Step timeout in ms (default timeoutMs + {@link LOCAL_STEP_TIMEOUT_GRACE_MS}): if no result arrives this long after
   * the attempt is dispatched (the orchestrator that ran it crashed), the attempt fails (StepTimeoutError, retryable)
   * and the retry runs the step again on the run's owner.
   */
  stepTimeoutMs?: number;
}

/** Options of an untyped local step (`.local(id, { type, ... })`). */
export interface LocalOptions<
  I = Record<string, unknown>,
  O = Record<string, unknown>,
> extends LocalPolicyOptions {
  /** Task type: the handler registered in the orchestrator application under this type runs it. */
  type: string;
  /** Input from the run input and earlier outputs (default: the run input). Must be deterministic. */
  input?: (c: StepContext<I, O>) => unknown;
}

/** Options of a typed local step (`.local(id, contract, { ... })`). */
export type ContractLocalOptions<I, O, C extends AnyTaskContract, R = TaskInputOf<C>> = LocalPolicyOptions &
  InputMapping<[c: StepContext<I, O>], I, TaskInputOf<C>, R>;

/** Options of a map step over items of type `Item` whose task is `C`; `A` is the aggregated output. */
export type ContractMapOptions<
  I,
  O,
  C extends AnyTaskContract,
  Item,
  A,
  R = TaskInputOf<C>,
> = StepPolicyOptions & {
  /** The items to fan out over (each becomes one command). Must be deterministic. */
  items: (c: StepContext<I, O>) => Item[];
  /** An item's command input (must be deterministic). */
  input: (item: Item, index: number, c: StepContext<I, O>) => NoExtra<R, TaskInputOf<C>>;
  /** Partition key of an item's command (default `<businessKey>/<index>`). */
  entityKey?: (item: Item, index: number, c: StepContext<I, O>) => string;
  /** Items in flight at once (default 10). */
  concurrency?: number;
  /** Fan-in: the step's output from the items' outputs, in item order (default: the array). */
  aggregate?: (outputs: TaskOutputOf<C>[]) => A;
};

/** A map step whose items are the commands' inputs themselves (no `input` mapping). */
export type ContractMapItemsOptions<I, O, C extends AnyTaskContract, A> = Omit<
  ContractMapOptions<I, O, C, TaskInputOf<C>, A>,
  'input'
> & { input?: undefined };

/** Options of an untyped map step (`.map(id, { type, items, ... })`). */
export interface MapOptions<
  I = Record<string, unknown>,
  O = Record<string, unknown>,
> extends StepPolicyOptions {
  type: string;
  items: (c: StepContext<I, O>) => unknown[];
  input?: (item: unknown, index: number, c: StepContext<I, O>) => unknown;
  entityKey?: (item: unknown, index: number, c: StepContext<I, O>) => string;
  concurrency?: number;
  aggregate?: (outputs: unknown[]) => unknown;
}

export interface TaskStep {
  kind: 'task';
  id: string;
  type: string;
  input: (c: StepContext) => unknown;
  entityKey: (c: StepContext) => string;
  retry: RetryPolicy;
  timeoutMs: number;
  stepTimeoutMs: number;
  workerAttempts: number;
  compensate?: {
    type: string;
    input: (c: StepContext) => unknown;
    retry: RetryPolicy;
    timeoutMs: number;
    /** The compensation's contract, when it was given one (typed steps). */
    contract?: AnyTaskContract;
  };
  /** The task's contract, when the step was defined with one (views mask its PII fields). */
  contract?: AnyTaskContract;
  /** A child step (`.child`): each attempt starts a run of this workflow instead of sending a task command. */
  child?: ChildRef;
  /**
   * A local step (`.local`): each attempt runs in the orchestrator process that owns the run (its handler registered
   * there by task type), after the transaction that dispatched it commits; nothing goes to a task topic.
   */
  local?: true;
}

/** The workflow a child step starts (see `.child` and `.childMap`). */
export interface ChildRef {
  workflow: string;
  version: number;
}

export interface MapStep {
  kind: 'map';
  id: string;
  type: string;
  items: (c: StepContext) => unknown[];
  input: (item: unknown, index: number, c: StepContext) => unknown;
  entityKey: (item: unknown, index: number, c: StepContext) => string;
  /** Items in flight at once. */
  concurrency: number;
  /** Fan-in: the step's output from the items' outputs, in item order (default: the array). */
  aggregate: (outputs: unknown[]) => unknown;
  retry: RetryPolicy;
  timeoutMs: number;
  stepTimeoutMs: number;
  workerAttempts: number;
  /** The items' task contract, when the step was defined with one (views mask its PII fields). */
  contract?: AnyTaskContract;
  /** Whether the step's output is the default aggregate (the items' outputs, in item order). */
  defaultAggregate: boolean;
  /** A child map (`.childMap`): each item starts a run of this workflow instead of sending a task command. */
  child?: ChildRef;
  /**
   * A child map's saga compensation (`.childMap(..., { compensate: true })`): each completed item's child is asked
   * to compensate itself (a CancelRun, not a task command); `retry` is the policy of each item's compensation
   * (one attempt), `timeoutMs` how long (ms) the compensation may go without an item's report.
   */
  compensate?: { type: string; retry: RetryPolicy; timeoutMs: number };
}

export interface ChoiceStep {
  kind: 'choice';
  id: string;
  branches: Array<{ when: (c: StepContext) => boolean; steps: Step[] }>;
  otherwise: Step[];
}

export interface WaitStep {
  kind: 'wait';
  id: string;
  /** Wait for a signal with this name (its payload becomes the step output)... */
  signal?: string;
  /** ...and/or for this long, in ms (a timer alone, or the signal's timeout: then the step fails). */
  timerMs?: number;
}

export type Step = TaskStep | MapStep | ChoiceStep | WaitStep;

/**
 * A built definition. `I` (its run input) and `Out` (its run output) are types only, for a parent's `.child` step
 * (its input mapping is checked against `I`, later steps see `Out`); nothing holds them at run time.
 */
export interface WorkflowDefinition<I = unknown, Out = unknown> {
  /** Types only (never set): the run input's and output's. */
  readonly __types?: { input: I; output: Out };
  name: string;
  version: number;
  steps: Step[];
  /** Run timeout in ms from the start (default none). */
  runTimeoutMs?: number;
  /** The run's output (default: the outputs of all steps). */
  output: (c: StepContext) => unknown;
  /** Whether `output` is the default (every step's output, by step id): views mask it step by step. */
  defaultOutput: boolean;
  /** The run input's schema (zod), when the definition gave one: StartRun inputs are checked against it. */
  inputSchema?: z.ZodType;
  /** Every step by id, including those inside choice branches. */
  stepIndex: Map<string, Step>;
}

/** A definition that breaks a rule (duplicate step id, bad option). Not retryable: fix the definition. */
export class InvalidDefinitionError extends KeyflowError {
  readonly code = 'INVALID_DEFINITION';
  readonly retryable = retryableOf('INVALID_DEFINITION');
  constructor(workflow: string, reason: string) {
    super(`workflow ${workflow}: ${reason}`);
  }
}

const defaultInput = (c: StepContext) => c.input;
const defaultKey = (c: StepContext) => c.businessKey;

function taskFields(name: string, id: string, o: StepPolicyOptions) {
  const timeoutMs = o.timeoutMs ?? 30_000;
  if (!(timeoutMs > 0)) throw new InvalidDefinitionError(name, `step ${id}: timeoutMs must be > 0`);
  const workerAttempts = o.workerAttempts ?? 1;
  if (!Number.isInteger(workerAttempts) || workerAttempts < 1)
    throw new InvalidDefinitionError(name, `step ${id}: workerAttempts must be an integer >= 1`);
  return {
    retry: retryPolicy(o.retry),
    timeoutMs,
    stepTimeoutMs: o.stepTimeoutMs ?? timeoutMs * workerAttempts + 30_000,
    workerAttempts,
  };
}

/** What a step method returns: the same kind of builder (`Kind`) with the outputs `O`. */
type Next<Kind extends 'steps' | 'workflow', I, O> = Kind extends 'workflow'
  ? WorkflowBuilder<I, O>
  : StepsBuilder<I, O>;

/**
 * The step methods, typed: `I` is the run input, `O` the outputs of the steps so far (by step id). Each method
 * returns the builder with the step's output added, so later steps see it typed.
 */
export interface StepMethods<I, O, Kind extends 'steps' | 'workflow'> {
  /** A task step by type name (untyped: its input and output are `unknown`). */
  task<const Id extends string>(id: Id, o: TaskOptions<I, O>): Next<Kind, I, WithOutput<O, Id, unknown>>;
  /**
   * A task step of a contract (typed): `.task('charge', chargePayment, { input: (c) => ({ amount: c.input.amount }) })`.
   * The options (and `input`) may be left out when the run input already has the contract's input type.
   */
  task<
    const Id extends string,
    C extends AnyTaskContract,
    Undo extends AnyTaskContract = AnyTaskContract,
    R extends TaskInputOf<C> = TaskInputOf<C>,
  >(
    id: Id,
    contract: C,
    ...options: DefaultFits<I, TaskInputOf<C>> extends true
      ? [o?: ContractTaskOptions<I, O, Id, C, Undo, R>]
      : [o: ContractTaskOptions<I, O, Id, C, Undo, R>]
  ): Next<Kind, I, WithOutput<O, Id, TaskOutputOf<C>>>;
  /**
   * A local step of a contract (typed as `.task`): it runs in the orchestrator process that owns the run, with no
   * worker round trip, at least once, under the same idempotency rules as a worker's task (docs/workflows.md "Local
   * steps": for short steps only). Its handler is registered in the orchestrator application by task type.
   */
  local<const Id extends string, C extends AnyTaskContract, R extends TaskInputOf<C> = TaskInputOf<C>>(
    id: Id,
    contract: C,
    ...options: DefaultFits<I, TaskInputOf<C>> extends true
      ? [o?: ContractLocalOptions<I, O, C, R>]
      : [o: ContractLocalOptions<I, O, C, R>]
  ): Next<Kind, I, WithOutput<O, Id, TaskOutputOf<C>>>;
  /** A local step by task type name (untyped: its input and output are `unknown`). */
  local<const Id extends string>(id: Id, o: LocalOptions<I, O>): Next<Kind, I, WithOutput<O, Id, unknown>>;
  /** A map step by task type name (untyped). */
  map<const Id extends string>(id: Id, o: MapOptions<I, O>): Next<Kind, I, WithOutput<O, Id, unknown>>;
  /** A map step of a contract whose `items` are the commands' inputs themselves (no `input` mapping). */
  map<const Id extends string, C extends AnyTaskContract, A = TaskOutputOf<C>[]>(
    id: Id,
    contract: C,
    o: ContractMapItemsOptions<I, O, C, A>,
  ): Next<Kind, I, WithOutput<O, Id, A>>;
  /**
   * A map step (fan-out over `items`, fan-in with `aggregate`) of a contract (typed): each item's command input is
   * `input(item, index, c)`; the step's output is `aggregate(outputs)` (default: the outputs in item order).
   */
  map<
    const Id extends string,
    C extends AnyTaskContract,
    Item,
    A = TaskOutputOf<C>[],
    R extends TaskInputOf<C> = TaskInputOf<C>,
  >(
    id: Id,
    contract: C,
    o: ContractMapOptions<I, O, C, Item, A, R>,
  ): Next<Kind, I, WithOutput<O, Id, A>>;
  /**
   * Branches: the first whose `when` holds runs its steps, else `otherwise`. Later steps see the outputs of every
   * branch's steps, typed and optional (only one branch ran).
   */
  choice<
    const Bs extends ReadonlyArray<{
      when: (c: StepContext<I, O>) => boolean;
      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- each branch's outputs are inferred from it
      steps: (b: StepsBuilder<I, O>) => StepsBuilder<I, any>;
    }>,
    E = NoOutputs,
  >(
    id: string,
    branches: Bs,
    otherwise?: (b: StepsBuilder<I, O>) => StepsBuilder<I, E>,
  ): Next<Kind, I, O & Partial<Omit<UnionToIntersection<BranchOutputs<Bs[number]> | E>, keyof O>>>;
  /**
   * A child workflow: each attempt starts a run of `definition` (on the partition of its own run id) and the step's
   * output is that run's output; a child that fails fails the step with its error (retried by `retry`). The child's
   * input is checked against the child's input type; later steps see the child's output type.
   */
  child<const Id extends string, CI, CO, R extends CI = CI>(
    id: Id,
    definition: WorkflowDefinition<CI, CO>,
    ...options: DefaultFits<I, CI> extends true
      ? [o?: ChildOptions<I, O, CI, R>]
      : [o: ChildOptions<I, O, CI, R>]
  ): Next<Kind, I, WithOutput<O, Id, CO>>;
  /** A map of child workflows: each item starts one run of `definition`; the output is `aggregate(outputs)`. */
  childMap<const Id extends string, CI, CO, Item, A = CO[], R extends CI = CI>(
    id: Id,
    definition: WorkflowDefinition<CI, CO>,
    o: ChildMapOptions<I, O, CI, CO, Item, A, R>,
  ): Next<Kind, I, WithOutput<O, Id, A>>;
  /** Waits for a signal (its payload becomes the step output) and/or a timer, in ms. */
  wait<const Id extends string>(
    id: Id,
    o: { signal?: string; timerMs?: number },
  ): Next<Kind, I, WithOutput<O, Id, unknown>>;
}

/** A choice branch's step list. */
export interface StepsBuilder<I = Record<string, unknown>, O = NoOutputs> extends StepMethods<I, O, 'steps'> {
  steps(): Step[];
}

/** The top-level builder: the step methods, the run timeout, the run's output and `build()`. */
export interface WorkflowBuilder<I = Record<string, unknown>, O = NoOutputs, Out = O> extends StepMethods<
  I,
  O,
  'workflow'
> {
  /** Run timeout in ms from the start. */
  timeout(ms: number): WorkflowBuilder<I, O, Out>;
  /** The run's output (default: the outputs of all steps, by step id). */
  output<R>(f: (c: StepContext<I, O>) => R): WorkflowBuilder<I, O, R>;
  /**
   * @throws InvalidDefinitionError on a duplicate or malformed step id (one ending in `.compensate` included), or an
   * empty workflow.
   */
  build(): WorkflowDefinition<I, Out>;
}

/** The builders' one implementation, untyped (the interfaces above type it at the call sites). */
class Builder {
  private readonly list: Step[] = [];
  private runTimeoutMs?: number;
  private outputFn: (c: StepContext) => unknown = (c) => c.outputs;
  private defaultOutput = true;

  constructor(
    private readonly name: string,
    private readonly version = 0,
    private readonly inputSchema?: z.ZodType,
  ) {}

  task(id: string, a: object, b?: object): this {
    const o = untypedTaskOptions(a as TaskOptions | AnyTaskContract, b as ContractOptionsAny | undefined);
    const input = o.input ?? defaultInput;
    const undo = (b as ContractOptionsAny | undefined)?.compensate?.task;
    this.list.push({
      kind: 'task',
      id,
      type: o.type,
      input,
      entityKey: o.entityKey ?? defaultKey,
      ...taskFields(this.name, id, o),
      compensate: o.compensate && {
        type: o.compensate.type,
        input: o.compensate.input ?? ((c) => ({ input: input(c), output: c.outputs[id] ?? null })),
        retry: retryPolicy(o.compensate.retry ?? { maxAttempts: 5 }),
        timeoutMs: o.compensate.timeoutMs ?? 30_000,
        ...(isContract(a) && undo ? { contract: undo } : {}),
      },
      ...(isContract(a) ? { contract: a } : {}),
    });
    return this;
  }

  local(id: string, a: object, b?: object): this {
    const o = (isContract(a) ? { ...b, type: a.type } : a) as LocalOptions;
    const timeoutMs = o.timeoutMs ?? LOCAL_TIMEOUT_MS;
    this.task(id, a, isContract(a) ? { ...b, timeoutMs } : { ...o, timeoutMs });
    const step = this.list[this.list.length - 1] as TaskStep;
    step.local = true;
    step.stepTimeoutMs = o.stepTimeoutMs ?? timeoutMs + LOCAL_STEP_TIMEOUT_GRACE_MS;
    return this;
  }

  map(id: string, a: object, b?: object): this {
    const o = (isContract(a) ? { ...b, type: a.type } : a) as MapOptions;
    const concurrency = o.concurrency ?? 10;
    if (!Number.isInteger(concurrency) || concurrency < 1)
      throw new InvalidDefinitionError(this.name, `step ${id}: concurrency must be an integer >= 1`);
    this.list.push({
      kind: 'map',
      id,
      type: o.type,
      items: o.items as MapStep['items'],
      input: o.input ?? ((item) => item),
      entityKey: o.entityKey ?? ((_i, index, c) => `${c.businessKey}/${index}`),
      concurrency,
      aggregate: o.aggregate ?? ((outs) => outs),
      defaultAggregate: !o.aggregate,
      ...taskFields(this.name, id, o),
      ...(isContract(a) ? { contract: a } : {}),
    });
    return this;
  }

  child(id: string, def: WorkflowDefinition, o: ChildOptions<never, never, unknown> = {}): this {
    const stepTimeoutMs = o.stepTimeoutMs ?? CHILD_STEP_TIMEOUT_MS;
    this.list.push({
      kind: 'task',
      id,
      type: `child:${def.name}`,
      input: (o.input as TaskStep['input'] | undefined) ?? defaultInput,
      entityKey: (o.businessKey as TaskStep['entityKey'] | undefined) ?? ((c) => `${c.businessKey}/${id}`),
      ...taskFields(this.name, id, { retry: o.retry, timeoutMs: stepTimeoutMs, stepTimeoutMs }),
      child: { workflow: def.name, version: def.version },
      ...(o.compensate
        ? {
            compensate: {
              type: `child-compensate:${def.name}`,
              input: () => null,
              retry: retryPolicy({ maxAttempts: 1 }),
              timeoutMs: stepTimeoutMs,
            },
          }
        : {}),
    });
    return this;
  }

  childMap(
    id: string,
    def: WorkflowDefinition,
    o: ChildMapOptions<never, never, unknown, unknown, unknown, unknown>,
  ): this {
    const stepTimeoutMs = o.stepTimeoutMs ?? CHILD_STEP_TIMEOUT_MS;
    this.map(id, {
      type: `child:${def.name}`,
      items: o.items as MapOptions['items'],
      input: o.input as MapOptions['input'],
      entityKey: o.businessKey as MapOptions['entityKey'],
      concurrency: o.concurrency,
      aggregate: o.aggregate as MapOptions['aggregate'],
      retry: o.retry,
      timeoutMs: stepTimeoutMs,
      stepTimeoutMs,
    });
    const step = this.list[this.list.length - 1] as MapStep;
    step.child = { workflow: def.name, version: def.version };
    if (o.compensate)
      step.compensate = {
        type: `child-compensate:${def.name}`,
        retry: retryPolicy({ maxAttempts: 1 }),
        timeoutMs: stepTimeoutMs,
      };
    return this;
  }

  choice(
    id: string,
    branches: Array<{ when: (c: StepContext) => boolean; steps: (b: Builder) => Builder }>,
    otherwise?: (b: Builder) => Builder,
  ): this {
    this.list.push({
      kind: 'choice',
      id,
      branches: branches.map((br) => ({ when: br.when, steps: br.steps(new Builder(this.name)).steps() })),
      otherwise: otherwise ? otherwise(new Builder(this.name)).steps() : [],
    });
    return this;
  }

  wait(id: string, o: { signal?: string; timerMs?: number }): this {
    if (!o.signal && o.timerMs === undefined)
      throw new InvalidDefinitionError(this.name, `step ${id}: wait needs a signal or a timerMs`);
    this.list.push({ kind: 'wait', id, ...o });
    return this;
  }

  steps(): Step[] {
    return [...this.list];
  }

  timeout(ms: number): this {
    this.runTimeoutMs = ms;
    return this;
  }

  output(f: (c: StepContext) => unknown): this {
    this.outputFn = f;
    this.defaultOutput = false;
    return this;
  }

  /**
   * @throws InvalidDefinitionError on a duplicate or malformed step id (one ending in `.compensate` included), or an
   * empty workflow.
   */
  build(): WorkflowDefinition {
    const stepIndex = new Map<string, Step>();
    const visit = (steps: Step[]) =>
      steps.forEach((s) => {
        if (!/^[A-Za-z0-9_.-]+$/.test(s.id))
          throw new InvalidDefinitionError(
            this.name,
            `step id ${JSON.stringify(s.id)} must match [A-Za-z0-9_.-]+`,
          );
        if (s.id.endsWith(COMPENSATION_SUFFIX))
          throw new InvalidDefinitionError(
            this.name,
            `step id ${s.id} must not end in ${COMPENSATION_SUFFIX}: that names a step's compensation`,
          );
        if (stepIndex.has(s.id)) throw new InvalidDefinitionError(this.name, `duplicate step id ${s.id}`);
        stepIndex.set(s.id, s);
        if (s.kind === 'choice') [...s.branches.map((b) => b.steps), s.otherwise].forEach(visit);
      });
    visit(this.list);
    if (this.list.length === 0) throw new InvalidDefinitionError(this.name, 'no steps');
    return {
      name: this.name,
      version: this.version,
      steps: this.steps(),
      runTimeoutMs: this.runTimeoutMs,
      output: this.outputFn,
      defaultOutput: this.defaultOutput,
      inputSchema: this.inputSchema,
      stepIndex,
    };
  }
}

/** The runtime shape of a typed step's options (the types above are checked at the call site). */
type ContractOptionsAny = Record<string, unknown> & {
  compensate?: Record<string, unknown> & { task?: AnyTaskContract };
};

function isContract(v: unknown): v is AnyTaskContract {
  return (
    typeof v === 'object' && v !== null && 'output' in v && typeof (v as { type?: unknown }).type === 'string'
  );
}

/** `.task(id, contract, options)` or `.task(id, options)` as one untyped options value. */
function untypedTaskOptions(
  a: TaskOptions | AnyTaskContract,
  b: ContractOptionsAny | undefined,
): TaskOptions {
  if (!isContract(a)) return a as TaskOptions;
  const o = (b ?? {}) as ContractOptionsAny;
  const undo = o.compensate;
  return {
    ...(o as Omit<TaskOptions, 'type'>),
    type: a.type,
    compensate: undo && {
      ...(undo as Omit<NonNullable<TaskOptions['compensate']>, 'type'>),
      type: undo.task ? undo.task.type : (undo as { type: string }).type,
    },
  };
}

/**
 * Starts a definition: `workflow(name, version).task(...)....build()`. With `options.input` (a zod schema) the run
 * input is typed in every step's functions and the API checks a StartRun's input against it (400 with the issues).
 * @throws InvalidDefinitionError when the version is not an integer >= 1.
 */
export function workflow<S extends z.ZodType = z.ZodType<Record<string, unknown>, Record<string, unknown>>>(
  name: string,
  version: number,
  options: { input?: S } = {},
): WorkflowBuilder<z.input<S>, NoOutputs> {
  if (!Number.isInteger(version) || version < 1)
    throw new InvalidDefinitionError(name, 'version must be an integer >= 1');
  return new Builder(name, version, options.input) as unknown as WorkflowBuilder<z.input<S>, NoOutputs>;
}

/** The task types of the local steps (`.local`) of `definitions`, each once: their handlers must be registered. */
export function localStepTypes(definitions: Iterable<WorkflowDefinition>): Set<string> {
  const types = new Set<string>();
  for (const def of definitions)
    for (const s of def.stepIndex.values()) if (s.kind === 'task' && s.local) types.add(s.type);
  return types;
}
