import { KeyflowError, retryableOf, toFailure } from '@keyflow/errors';
import type { EventName, EventsByName, LogicalTopic, TaskCompleted, TaskFailed } from '@keyflow/schemas';
import type { DecodedEvent, EventCodec } from './codec';
import type { MessageLocation } from './errors';

/**
 * Where payloads too large for their topic live (the claim check: `ClaimCheck` of `@keyflow/blobs` has this shape).
 * Kept structural so that the contracts do not depend on a blob store implementation.
 */
export interface PayloadBlobs {
  /** Whether `text` travels inline (at most half of max.message.bytes in UTF-8). */
  fitsInline(text: string): boolean;
  /**
   * `text` inline when it fits, else stored under `key` and referenced.
   * @throws a non-retryable error (PAYLOAD_TOO_LARGE) when it cannot be carried; store outages as they are (retryable)
   */
  offload(
    what: string,
    key: string | (() => string),
    text: string,
    retentionMs: number | null,
  ): Promise<{ inline: string; ref: string | null }>;
  /**
   * The text of a payload: `inline` when `ref` is empty, else the blob `ref` names.
   * @throws BlobNotFoundError and the like (not retryable) when the blob cannot be read for good; outages retryable
   */
  resolve(inline: string, ref: string | null | undefined): Promise<string>;
}

/** The field of an event that carries a claim-checked payload, and the field naming its blob. */
type ClaimField = { text: 'output' | 'input' | 'state'; ref: 'outputRef' | 'inputRef' | 'stateRef' };

/** The events whose payload may come by claim check (README "Claim check"): the text field and its reference. */
export const CLAIM_CHECKED_FIELDS: Partial<Record<EventName, ClaimField>> = {
  TaskCommand: { text: 'input', ref: 'inputRef' },
  TaskCompleted: { text: 'output', ref: 'outputRef' },
  RunSnapshot: { text: 'state', ref: 'stateRef' },
  StepCompleted: { text: 'output', ref: 'outputRef' },
  RunCompleted: { text: 'output', ref: 'outputRef' },
  RunStarted: { text: 'input', ref: 'inputRef' },
};

/** A claim-checked payload names a blob, but no blob store is configured here to read it. Not retryable. */
export class NoBlobStoreError extends KeyflowError {
  readonly code = 'NO_BLOB_STORE';
  readonly retryable = retryableOf('NO_BLOB_STORE');
  constructor(readonly ref: string) {
    super(`no blob store to read ${ref}`);
  }
}

/**
 * A payload's text is not JSON. The message names the payload and the parser's error class, never the parser's
 * message (it quotes the text around the fault, which may be personal data); the parser's error is the `cause`.
 * Not retryable.
 */
export class PayloadNotJsonError extends KeyflowError {
  readonly code = 'PAYLOAD_NOT_JSON';
  readonly retryable = retryableOf('PAYLOAD_NOT_JSON');
  constructor(what: string, cause: unknown) {
    super(`${what} is not JSON (${(cause as Error)?.name ?? 'Error'})`, { cause });
  }
}

/** A payload is JSON but not of the shape its contract asks for (`reason` says how). Not retryable. */
export class PayloadInvalidError extends KeyflowError {
  readonly code = 'PAYLOAD_INVALID';
  readonly retryable = retryableOf('PAYLOAD_INVALID');
  constructor(
    what: string,
    readonly reason: string,
  ) {
    super(`${what} is not valid: ${reason}`);
  }
}

/** A validation of a parsed payload: undefined when it is valid, else the reason it is not. */
export type PayloadCheck = (value: unknown) => string | undefined;

/**
 * The one way from a record's bytes to a typed, validated value and back (in the spirit of a `Serde<T>` at the
 * boundary). Each step is its own method so that a caller keeps its own policy per failure (dead-letter, skip,
 * fail the step, retry), and none adds a turn of the event loop where there is nothing to wait for:
 *
 * 1. {@link decode} / {@link decodeIfKnown}: Avro via the registry codec (Confluent wire format).
 * 2. {@link resolve} / {@link text}: the claim-checked payload read back from the blob store (README "Claim check").
 * 3. {@link parse}: JSON text to a value, validated by a {@link PayloadCheck} (a task contract, a run state's shape).
 *
 * And back: {@link offload} (claim check above the size limit) then {@link encode}.
 *
 * Errors (each says `retryable`): decoding throws the codec's ContractErrors (registry outages retryable, bytes that
 * never decode not); reading a blob throws the store's errors (outages retryable; a blob gone for good, or
 * {@link NoBlobStoreError}, not); parsing throws {@link PayloadNotJsonError} or {@link PayloadInvalidError} (not
 * retryable).
 */
export class PayloadSerde {
  /**
   * @param codec the registry codec of the topics read and written
   * @param blobs the claim check; without it, a payload that came by reference cannot be read ({@link NoBlobStoreError})
   *   and a payload over the limit cannot be written
   */
  constructor(
    readonly codec: EventCodec,
    readonly blobs?: PayloadBlobs,
  ) {}

  /**
   * A record value of a registered logical topic as its event (the writer's schema fetched when not known here).
   * @throws the codec's ContractErrors (see EventCodec.decode)
   */
  decode(logical: LogicalTopic, bytes: Buffer | null, where: MessageLocation): Promise<DecodedEvent> {
    return this.codec.decode(logical, bytes, where);
  }

  /**
   * {@link decode} without a turn of the event loop when the writer's schema is known here; undefined when it is not.
   * @throws as {@link decode}, but never a registry error
   */
  decodeIfKnown(
    logical: LogicalTopic,
    bytes: Buffer | null,
    where: MessageLocation,
  ): DecodedEvent | undefined {
    return this.codec.decodeIfKnown(logical, bytes, where);
  }

  /**
   * The text of a claim-checked payload: `inline` itself (no promise) when `ref` is empty, else a promise of the
   * blob's text. Callers await only a promise: `let t = serde.text(v, r); if (typeof t !== 'string') t = await t`.
   * @throws (rejects) NoBlobStoreError without a blob store; the store's errors as {@link PayloadBlobs.resolve}
   */
  text(inline: string, ref: string | null | undefined): string | Promise<string> {
    if (!ref) return inline;
    if (!this.blobs) return Promise.reject(new NoBlobStoreError(ref));
    return this.blobs.resolve(inline, ref);
  }

  /**
   * A decoded event with its claim-checked payload (see {@link CLAIM_CHECKED_FIELDS}) read back inline; the event
   * itself when it carries none by reference.
   * @throws as {@link text}
   */
  async resolve<D extends DecodedEvent>(d: D): Promise<D> {
    const f = CLAIM_CHECKED_FIELDS[d.event];
    const v = d.value as unknown as Record<string, string | null | undefined>;
    if (!f || !v[f.ref]) return d;
    return { ...d, value: { ...d.value, [f.text]: await this.text(v[f.text] ?? '', v[f.ref]) } };
  }

  /**
   * A payload's JSON text as a value, checked by `check` when given.
   * @param what names the payload in errors (e.g. `input of <idempotency key>`)
   * @throws PayloadNotJsonError when the text is not JSON; PayloadInvalidError when `check` gives a reason
   */
  parse<T = unknown>(text: string, what: string, check?: PayloadCheck): T {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (e) {
      throw new PayloadNotJsonError(what, e);
    }
    const reason = check?.(value);
    if (reason !== undefined) throw new PayloadInvalidError(what, reason);
    return value as T;
  }

  /**
   * The payload `text` as it travels: inline when it fits, else stored as a blob under `key` and referenced.
   * @param what names the payload in errors
   * @throws PayloadTooLargeError (not retryable) when it does not fit and there is no store, or it is over the blob
   *   limit; store outages as they are (retryable)
   */
  offload(
    what: string,
    key: string | (() => string),
    text: string,
    retentionMs: number | null,
  ): Promise<{ inline: string; ref: string | null }> {
    if (this.blobs) return this.blobs.offload(what, key, text, retentionMs);
    return Promise.resolve({ inline: text, ref: null });
  }

  /**
   * An event as the bytes of a record of a registered logical topic (Confluent wire format).
   * @throws InvalidEventError when the value does not match the event's schema; TopicNotRegisteredError
   */
  encode<E extends EventName>(logical: LogicalTopic, event: E, value: EventsByName[E]): Buffer {
    return this.codec.encode(logical, event, value);
  }
}

/**
 * The failure record of an error (TaskFailed.error), shaped like `toFailure()`: class, message, code, not retryable,
 * one attempt failed at `at` (ms since epoch).
 */
export function failureOf(err: Error & { code?: string }, at: number): TaskFailed['error'] {
  return { ...toFailure(err, { retryable: false }), attempts: 1, firstFailureAt: at, lastFailureAt: at };
}

/**
 * A TaskCompleted whose output cannot be read for good (its blob swept, corrupt, or no store here) as the TaskFailed
 * of its step with that error (not retryable, at the result's occurredAt): the step fails with a named error instead
 * of blocking its partition. Same run, step, attempt and metadata as the result.
 */
export function unreadableResultAsFailure(
  d: { event: 'TaskCompleted'; value: TaskCompleted; schemaId: number },
  err: Error & { code?: string },
): { event: 'TaskFailed'; value: TaskFailed; schemaId: number } {
  const v = d.value;
  return {
    event: 'TaskFailed',
    schemaId: d.schemaId,
    value: {
      metadata: v.metadata,
      runId: v.runId,
      stepId: v.stepId,
      taskType: v.taskType,
      attempt: v.attempt,
      idempotencyKey: v.idempotencyKey,
      error: failureOf(err, v.metadata.occurredAt),
      workerId: v.workerId,
    },
  };
}
