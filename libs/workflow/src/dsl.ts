import { retryPolicy, type RetryPolicy, type RetryPolicyInput } from './retry';

/** Suffix of a compensation's step id (`<step>.compensate`); no step of a definition may use it. */
export const COMPENSATION_SUFFIX = '.compensate';
/**
 * The workflow definition DSL. Definitions are TypeScript values, named and versioned; a run keeps the version it
 * started with. Steps run in sequence; step kinds: task, choice, map (parallel fan-out and fan-in), wait.
 *
 *   const order = workflow('order', 1)
 *     .task('reserve', { type: 'inventory.reserve', input: (c) => c.input, compensate: { type: 'inventory.release' } })
 *     .task('charge', { type: 'payment.charge', input: (c) => ({ amount: c.input.amount }), retry: { maxAttempts: 5 } })
 *     .choice('ship-or-pickup', [{ when: (c) => c.input.pickup, steps: (b) => b.task('notify', { type: 'notify' }) }],
 *             (b) => b.task('ship', { type: 'shipping.create' }))
 *     .build();
 */

/**
 * What input mappings and conditions see: the run input and the outputs of completed steps, by step id. Frozen
 * (deeply): a function that changes what it is given throws a TypeError, and that input is dead-lettered with it
 * (the run's state is shared between the engine's copies of it; a change would leak into the committed state).
 */
export interface StepContext {
  runId: string;
  businessKey: string;
  input: Record<string, unknown>;
  outputs: Record<string, unknown>;
}

export interface TaskOptions {
  /** Task type: commands go to `task.<type>`. */
  type: string;
  /** Input from the run input and earlier outputs (default: the run input). Must be deterministic. */
  input?: (c: StepContext) => unknown;
  /** Partition key of the command (default: the run's business key), so one entity's tasks stay in order. */
  entityKey?: (c: StepContext) => string;
  /** Orchestrator-level retry policy: attempts, backoff with full jitter, non-retryable error classes. */
  retry?: RetryPolicyInput;
  /** Per-attempt timeout the worker enforces, in ms (default 30 000). */
  timeoutMs?: number;
  /**
   * Step timeout in ms: if no result arrives this long after an attempt is scheduled, the attempt counts as failed
   * (retryable, error class StepTimeoutError). Default: timeoutMs + 30 000.
   */
  stepTimeoutMs?: number;
  /** Attempts the worker may make in process before reporting (default 1: retries are the orchestrator's). */
  workerAttempts?: number;
  /** Saga compensation, run if a later step fails for good. Input default: this step's input and output. */
  compensate?: {
    type: string;
    input?: (c: StepContext) => unknown;
    retry?: RetryPolicyInput;
    timeoutMs?: number;
  };
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
  compensate?: { type: string; input: (c: StepContext) => unknown; retry: RetryPolicy; timeoutMs: number };
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

export interface WorkflowDefinition {
  name: string;
  version: number;
  steps: Step[];
  /** Run timeout in ms from the start (default none). */
  runTimeoutMs?: number;
  /** The run's output (default: the outputs of all steps). */
  output: (c: StepContext) => unknown;
  /** Every step by id, including those inside choice branches. */
  stepIndex: Map<string, Step>;
}

/** A definition that breaks a rule (duplicate step id, bad option). Not retryable: fix the definition. */
export class InvalidDefinitionError extends Error {
  readonly retryable = false;
  constructor(workflow: string, reason: string) {
    super(`workflow ${workflow}: ${reason}`);
    this.name = 'InvalidDefinitionError';
  }
}

const defaultInput = (c: StepContext) => c.input;
const defaultKey = (c: StepContext) => c.businessKey;

function taskFields(
  name: string,
  id: string,
  o: Omit<TaskOptions, 'type' | 'input' | 'entityKey' | 'compensate'>,
) {
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

/** Builds a step list; `workflow()` and choice branches use it. */
export class StepsBuilder {
  protected readonly list: Step[] = [];
  constructor(protected readonly name: string) {}

  task(id: string, o: TaskOptions): this {
    const input = o.input ?? defaultInput;
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
      },
    });
    return this;
  }

  map(
    id: string,
    o: Omit<TaskOptions, 'input' | 'entityKey' | 'compensate'> & {
      items: (c: StepContext) => unknown[];
      input?: (item: unknown, index: number, c: StepContext) => unknown;
      entityKey?: (item: unknown, index: number, c: StepContext) => string;
      concurrency?: number;
      aggregate?: (outputs: unknown[]) => unknown;
    },
  ): this {
    const concurrency = o.concurrency ?? 10;
    if (!Number.isInteger(concurrency) || concurrency < 1)
      throw new InvalidDefinitionError(this.name, `step ${id}: concurrency must be an integer >= 1`);
    this.list.push({
      kind: 'map',
      id,
      type: o.type,
      items: o.items,
      input: o.input ?? ((item) => item),
      entityKey: o.entityKey ?? ((_i, index, c) => `${c.businessKey}/${index}`),
      concurrency,
      aggregate: o.aggregate ?? ((outs) => outs),
      ...taskFields(this.name, id, o),
    });
    return this;
  }

  choice(
    id: string,
    branches: Array<{ when: (c: StepContext) => boolean; steps: (b: StepsBuilder) => StepsBuilder }>,
    otherwise?: (b: StepsBuilder) => StepsBuilder,
  ): this {
    this.list.push({
      kind: 'choice',
      id,
      branches: branches.map((br) => ({
        when: br.when,
        steps: br.steps(new StepsBuilder(this.name)).steps(),
      })),
      otherwise: otherwise ? otherwise(new StepsBuilder(this.name)).steps() : [],
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
}

export class WorkflowBuilder extends StepsBuilder {
  private runTimeoutMs?: number;
  private outputFn: (c: StepContext) => unknown = (c) => c.outputs;

  constructor(
    name: string,
    private readonly version: number,
  ) {
    super(name);
  }

  timeout(ms: number): this {
    this.runTimeoutMs = ms;
    return this;
  }

  output(f: (c: StepContext) => unknown): this {
    this.outputFn = f;
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
      stepIndex,
    };
  }
}

/** Starts a definition: `workflow(name, version).task(...)....build()`. */
export function workflow(name: string, version: number): WorkflowBuilder {
  if (!Number.isInteger(version) || version < 1)
    throw new InvalidDefinitionError(name, 'version must be an integer >= 1');
  return new WorkflowBuilder(name, version);
}
