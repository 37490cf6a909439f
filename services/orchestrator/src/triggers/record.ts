import { KeyflowError, retryableOf, isRetryable, type ErrorCode } from '@keyflow/errors';
import type { EventCodec } from '@keyflow/contracts';
import type { ConsumedMessage, IHeaders } from '@keyflow/kafka';
import {
  runInputIssues,
  type SignalTarget,
  type TriggerDefinition,
  type TriggerRecord,
  type WorkflowDefinition,
} from '@keyflow/workflow';

/**
 * Headers a trigger puts on its DLQ records (beside the triage headers): where the record came from in the source
 * topic. A redrive keeps them (it strips only the triage headers), so a redriven record is read as the original
 * (same topic, partition, offset and timestamp: the same default run id).
 */
export const TRIGGER_SOURCE_HEADERS = {
  topic: 'x-keyflow-trigger-source-topic',
  partition: 'x-keyflow-trigger-source-partition',
  offset: 'x-keyflow-trigger-source-offset',
  timestamp: 'x-keyflow-trigger-source-timestamp',
} as const;

/** Confluent wire format's first byte (docs.confluent.io, "Wire format"). */
const MAGIC_BYTE = 0;

/** A source record that cannot start or signal a run; its code names why (docs/reference/errors.md). */
export class TriggerRecordError extends KeyflowError {
  readonly retryable: boolean;
  constructor(
    readonly code: Extract<
      ErrorCode,
      | 'TRIGGER_RECORD_UNDECODABLE'
      | 'TRIGGER_RECORD_UNMAPPABLE'
      | 'TRIGGER_INPUT_INVALID'
      | 'TRIGGER_NO_SUCH_RUN'
      | 'PAYLOAD_TOO_LARGE'
    >,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.retryable = retryableOf(code);
  }
}

/** What one record becomes. */
export type Applied =
  | {
      kind: 'start';
      runId: string;
      businessKey: string;
      input: unknown;
      workflow: WorkflowDefinition;
    }
  | { kind: 'signal'; target: SignalTarget; payload: unknown; signal: string };

function headerText(h: IHeaders | undefined, name: string): string | undefined {
  const v = h?.[name];
  if (v === undefined || v === null) return undefined;
  return (Array.isArray(v) ? v.at(-1) : v)?.toString();
}

/**
 * The record as the trigger's functions see it. A record of the trigger's own topic (a redrive) is read as the
 * source record it came from ({@link TRIGGER_SOURCE_HEADERS}).
 * @throws TriggerRecordError TRIGGER_RECORD_UNDECODABLE for a null value or one neither Avro (registry) nor JSON
 *   (as `format` allows); the registry's retryable errors as they are (the record is not at fault)
 */
export async function triggerRecord(
  def: TriggerDefinition,
  codec: EventCodec,
  m: ConsumedMessage,
): Promise<TriggerRecord> {
  const headers: Record<string, string> = {};
  for (const k of Object.keys(m.headers ?? {})) headers[k] = headerText(m.headers, k) ?? '';
  const origin = headers[TRIGGER_SOURCE_HEADERS.topic];
  const where = { topic: m.topic, partition: m.partition, offset: m.offset };
  return {
    topic: origin ?? m.topic,
    partition: origin ? Number(headers[TRIGGER_SOURCE_HEADERS.partition]) : m.partition,
    offset: origin ? headers[TRIGGER_SOURCE_HEADERS.offset] : m.offset,
    key: m.key === null ? null : m.key.toString('utf8'),
    value: await valueOf(def, codec, m.value, where),
    headers,
    timestamp: Number(origin ? headers[TRIGGER_SOURCE_HEADERS.timestamp] : m.timestamp),
  };
}

async function valueOf(
  def: TriggerDefinition,
  codec: EventCodec,
  value: Buffer | null,
  where: { topic: string; partition: number; offset: string },
): Promise<unknown> {
  if (value === null) throw new TriggerRecordError('TRIGGER_RECORD_UNDECODABLE', 'null value (a tombstone)');
  const avro = def.format === 'avro' || (def.format === 'auto' && value[0] === MAGIC_BYTE);
  if (avro) {
    try {
      return await codec.decodeForeign(value, where);
    } catch (e) {
      if (isRetryable(e, false)) throw e; // the registry, not the record
      throw new TriggerRecordError(
        'TRIGGER_RECORD_UNDECODABLE',
        `not Avro the registry knows: ${(e as Error).message}`,
        {
          cause: e,
        },
      );
    }
  }
  try {
    return JSON.parse(value.toString('utf8')) as unknown;
  } catch (e) {
    throw new TriggerRecordError(
      'TRIGGER_RECORD_UNDECODABLE',
      `not JSON (${value.length} bytes): ${(e as Error).message}`,
    );
  }
}

/** Calls one of the trigger's functions; what it throws becomes TRIGGER_RECORD_UNMAPPABLE naming the function. */
function call<T>(fn: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw new TriggerRecordError(
      'TRIGGER_RECORD_UNMAPPABLE',
      `${fn} threw: ${(e as Error)?.message ?? String(e)}`,
      {
        cause: e,
      },
    );
  }
}

function text(fn: string, v: unknown, maxBytes = 1_000): string {
  if (typeof v !== 'string' || v.length === 0)
    throw new TriggerRecordError(
      'TRIGGER_RECORD_UNMAPPABLE',
      `${fn} returned ${typeof v}, not a non-empty string`,
    );
  if (Buffer.byteLength(v) > maxBytes)
    throw new TriggerRecordError('TRIGGER_RECORD_UNMAPPABLE', `${fn} returned more than ${maxBytes} bytes`);
  return v;
}

/** A JSON-safe copy of `v` (what the run input or a signal payload travels as), or UNMAPPABLE. */
function jsonValue(fn: string, v: unknown): unknown {
  const t = call(fn, () => JSON.stringify(v));
  if (t === undefined)
    throw new TriggerRecordError('TRIGGER_RECORD_UNMAPPABLE', `${fn} returned a value JSON cannot carry`);
  return JSON.parse(t) as unknown;
}

/**
 * What the record becomes: a start (run id, business key, checked input) or a signal (its target and payload).
 * @param workflow the definition a start trigger's runs start with (its latest version here)
 * @throws TriggerRecordError TRIGGER_RECORD_UNMAPPABLE (a function threw or returned a wrong shape),
 *   TRIGGER_INPUT_INVALID (the input fails the workflow's input schema: each issue's path and message)
 */
export function applied(
  def: TriggerDefinition,
  r: TriggerRecord,
  workflow: WorkflowDefinition | undefined,
): Applied {
  if (def.kind === 'start') {
    const runId = text(
      'runId',
      call('runId', () => def.runId(r)),
    );
    const businessKey = text(
      'businessKey',
      call('businessKey', () => def.businessKey(r)),
    );
    const input = jsonValue(
      'input',
      call('input', () => def.input(r)),
    );
    const issues = runInputIssues(workflow!, input);
    if (issues.length)
      throw new TriggerRecordError(
        'TRIGGER_INPUT_INVALID',
        `input does not match workflow ${workflow!.name} v${workflow!.version}: ${issues
          .map((i) => `${i.path}: ${i.message}`)
          .join('; ')}`,
      );
    return { kind: 'start', runId, businessKey, input, workflow: workflow! };
  }
  const target = call('run', () => def.run(r));
  const runId = (target as { runId?: unknown } | null)?.runId;
  const businessKey = (target as { businessKey?: unknown } | null)?.businessKey;
  const checked: SignalTarget =
    runId !== undefined
      ? { runId: text('run().runId', runId) }
      : { businessKey: text('run().businessKey', businessKey) };
  return {
    kind: 'signal',
    target: checked,
    payload: jsonValue(
      'payload',
      call('payload', () => def.payload(r)),
    ),
    signal: def.signal,
  };
}
