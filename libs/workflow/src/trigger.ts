import { KeyflowError, retryableOf } from '@keyflow/errors';
import type { WorkflowDefinition } from './dsl';

/**
 * Topic triggers: "for each record of topic T (read as consumer group G), start workflow W" and "for each record of
 * topic T, signal the run K(record) with signal S". A trigger reads a team's own topic (written by any producer, in
 * any language, keyed or not, any compression) and turns each record into one StartRun or SignalRun, exactly once:
 * the orchestrator's trigger runner commits the source offsets, the requests and its progress mark in one Kafka
 * transaction (KIP-98), so restarts, rebalances, a group reset to earliest and a broker kill neither lose nor repeat
 * a record. See docs/triggers.md.
 *
 *   const orders = startTrigger({ name: 'orders', topic: 'orders', workflow: orderSaga,
 *     input: (r) => r.value as OrderInput });
 *   const paid = signalTrigger({ name: 'payments', topic: 'payments', signal: 'paid',
 *     run: (r) => ({ businessKey: r.key! }) });
 *   bootstrapOrchestrator([orderSaga], process.env, [], [orders, paid]);
 */

/** A record of a source topic as a trigger's functions see it. */
export interface TriggerRecord {
  /** The source topic's name as the broker has it (keyflow's topic prefix is not applied to a team's topics). */
  topic: string;
  partition: number;
  /** The record's offset, a decimal string (a Kafka offset is a 64-bit integer). */
  offset: string;
  /** The record key as UTF-8 text; null when the record has none. */
  key: string | null;
  /**
   * The decoded value: an Avro record read through the schema registry (the Confluent wire format: magic byte 0 and
   * a 4-byte schema id, whatever subject naming its producer used), or parsed JSON.
   */
  value: unknown;
  /** Headers as UTF-8 text (a header given twice keeps its last value). */
  headers: Record<string, string>;
  /** The record's timestamp (CreateTime or LogAppendTime, as the topic has it), ms since the epoch. */
  timestamp: number;
}

/** How a trigger reads record values: `auto` takes the Confluent wire format when the value starts with byte 0. */
export type TriggerFormat = 'auto' | 'avro' | 'json';

/**
 * `offset` (default): the runs of one record key start in offset order (a key's next StartRun is written once the
 * previous run has started), runs of different keys in parallel. `key`: a key's next run starts only after its
 * previous run ended (one run per key at a time), for entities whose sagas must not overlap.
 */
export type SerializeBy = 'offset' | 'key';

/** Options both kinds of trigger take. */
interface TriggerCommonOptions {
  /** The trigger's name: `[a-z0-9][a-z0-9-]*`, at most 100 characters, unique in the application. */
  name: string;
  /** The source topic (its broker name; keyflow's KEYFLOW_TOPIC_PREFIX is not added). keyflow never writes to it. */
  topic: string;
  /** The consumer group the trigger reads as (default `keyflow-trigger-<name>`, with the topic prefix before it). */
  group?: string;
  /** How values are read (default `auto`). */
  format?: TriggerFormat;
  /**
   * Most runs of this trigger in flight on one orchestrator instance (runs it started that have not ended, plus the
   * records it holds behind their key) before that instance pauses reading the trigger's partitions (default 1000);
   * it resumes below 90 % of it.
   */
  maxInFlight?: number;
}

/** Options of {@link startTrigger}. */
export interface StartTriggerOptions<I = unknown> extends TriggerCommonOptions {
  /** The workflow each record starts: a definition (its latest version runs) or a workflow name. */
  workflow: WorkflowDefinition | string;
  /** The run input (default: the record's value). Checked against the workflow's input schema. */
  input?: (r: TriggerRecord) => I;
  /**
   * The run id (default `<name>:<topic>:<partition>:<offset>`). A run id given twice starts one run (the engine keeps
   * ended runs for ORCHESTRATOR_RUN_RETENTION_MS), so a business id here makes the trigger idempotent by it.
   */
  runId?: (r: TriggerRecord) => string;
  /** The run's business key (default: the record key, or the run id when the record has none or an empty one). */
  businessKey?: (r: TriggerRecord) => string;
  /** Order of one key's runs (default `offset`). */
  serializeBy?: SerializeBy;
}

/** Which run a signal goes to: by run id, or the newest run still going whose business key is this. */
export type SignalTarget = { runId: string } | { businessKey: string };

/** Options of {@link signalTrigger}. */
export interface SignalTriggerOptions extends TriggerCommonOptions {
  /** The signal's name (what the workflow's `.wait(id, { signal })` waits for). */
  signal: string;
  /** The run each record signals. */
  run: (r: TriggerRecord) => SignalTarget;
  /** The signal's payload (default: the record's value). */
  payload?: (r: TriggerRecord) => unknown;
  /**
   * How long a record waits for its run to appear (a run started a moment ago by another trigger), in ms (default
   * 30 000); after it, the record goes to the trigger's DLQ as TRIGGER_NO_SUCH_RUN.
   */
  awaitRunMs?: number;
}

/** A trigger with every option resolved (the form the runner reads: no optional fields). */
export type TriggerDefinition = StartTriggerDefinition | SignalTriggerDefinition;

interface TriggerCommon {
  name: string;
  topic: string;
  /** The group name before the topic prefix; null for the default (`keyflow-trigger-<name>`). */
  group: string | null;
  format: TriggerFormat;
  maxInFlight: number;
}

export interface StartTriggerDefinition extends TriggerCommon {
  kind: 'start';
  workflow: string;
  input: (r: TriggerRecord) => unknown;
  runId: (r: TriggerRecord) => string;
  businessKey: (r: TriggerRecord) => string;
  serializeBy: SerializeBy;
}

export interface SignalTriggerDefinition extends TriggerCommon {
  kind: 'signal';
  signal: string;
  run: (r: TriggerRecord) => SignalTarget;
  payload: (r: TriggerRecord) => unknown;
  awaitRunMs: number;
}

/** A trigger definition that breaks a rule (bad name, bad option). Not retryable: fix the definition. */
export class InvalidTriggerError extends KeyflowError {
  readonly code = 'INVALID_TRIGGER';
  readonly retryable = retryableOf('INVALID_TRIGGER');
  constructor(name: string, reason: string) {
    super(`trigger ${name}: ${reason}`);
  }
}

/** What a trigger name may be: it names a consumer group, a DLQ topic and metric labels. */
export const TRIGGER_NAME = /^[a-z0-9][a-z0-9-]{0,99}$/;
/** Default of `maxInFlight`. */
export const DEFAULT_TRIGGER_MAX_IN_FLIGHT = 1_000;
/** Default of `awaitRunMs`, in ms. */
export const DEFAULT_AWAIT_RUN_MS = 30_000;
/** Kafka's limit on a topic name (Kafka docs, "topic names": at most 249 of `[a-zA-Z0-9._-]`, not `.` or `..`). */
const TOPIC_NAME = /^(?!\.\.?$)[a-zA-Z0-9._-]{1,249}$/;

/** The default run id of a record: `<trigger>:<topic>:<partition>:<offset>` (unique per record, stable on replay). */
export const recordRunId = (trigger: string, r: TriggerRecord): string =>
  `${trigger}:${r.topic}:${r.partition}:${r.offset}`;

function common(o: TriggerCommonOptions): TriggerCommon {
  if (!TRIGGER_NAME.test(o.name)) throw new InvalidTriggerError(o.name, `name must match ${TRIGGER_NAME}`);
  if (!TOPIC_NAME.test(o.topic))
    throw new InvalidTriggerError(o.name, `topic ${JSON.stringify(o.topic)} is not a Kafka topic name`);
  const maxInFlight = o.maxInFlight ?? DEFAULT_TRIGGER_MAX_IN_FLIGHT;
  if (!Number.isInteger(maxInFlight) || maxInFlight < 1)
    throw new InvalidTriggerError(o.name, 'maxInFlight must be an integer >= 1');
  const format = o.format ?? 'auto';
  if (!['auto', 'avro', 'json'].includes(format))
    throw new InvalidTriggerError(o.name, `format must be auto, avro or json`);
  if (o.group !== undefined && !o.group) throw new InvalidTriggerError(o.name, 'group must not be empty');
  return { name: o.name, topic: o.topic, group: o.group ?? null, format, maxInFlight };
}

/**
 * A trigger that starts one run of `workflow` per record of `topic`, exactly once per record.
 * @throws InvalidTriggerError for a name, topic or option that could never work
 */
export function startTrigger<I>(o: StartTriggerOptions<I>): StartTriggerDefinition {
  const c = common(o);
  const serializeBy = o.serializeBy ?? 'offset';
  if (serializeBy !== 'offset' && serializeBy !== 'key')
    throw new InvalidTriggerError(o.name, 'serializeBy must be offset or key');
  const workflow = typeof o.workflow === 'string' ? o.workflow : o.workflow?.name;
  if (!workflow) throw new InvalidTriggerError(o.name, 'workflow must be a definition or a non-empty name');
  const runId = o.runId ?? ((r: TriggerRecord) => recordRunId(o.name, r));
  return {
    ...c,
    kind: 'start',
    workflow,
    input: o.input ?? ((r) => r.value),
    runId,
    // An empty key (Kafka tells it from no key) is no business key: applied() rejects an empty one.
    businessKey: o.businessKey ?? ((r) => r.key || runId(r)),
    serializeBy,
  };
}

/**
 * A trigger that delivers signal `signal` to the run each record of `topic` names, exactly once per record.
 * @throws InvalidTriggerError for a name, topic or option that could never work
 */
export function signalTrigger(o: SignalTriggerOptions): SignalTriggerDefinition {
  const c = common(o);
  if (!o.signal) throw new InvalidTriggerError(o.name, 'signal must not be empty');
  const awaitRunMs = o.awaitRunMs ?? DEFAULT_AWAIT_RUN_MS;
  if (!(awaitRunMs >= 0)) throw new InvalidTriggerError(o.name, 'awaitRunMs must be >= 0');
  return {
    ...c,
    kind: 'signal',
    signal: o.signal,
    run: o.run,
    payload: o.payload ?? ((r) => r.value),
    awaitRunMs,
  };
}
