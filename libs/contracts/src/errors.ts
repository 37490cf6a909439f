import { KeyflowError, retryableOf } from '@keyflow/errors';
/**
 * Typed errors of the contracts layer. Every error has a stable `code` and says whether retrying can help
 * (`retryable`): a consumer retries a retryable one (the registry may come back) and sends a non-retryable one
 * to the DLQ with `reason` and the message's location as triage metadata.
 */
export type ContractErrorCode =
  | 'TOMBSTONE'
  | 'MISSING_MAGIC_BYTE'
  | 'UNKNOWN_SCHEMA_ID'
  | 'MALFORMED_PAYLOAD'
  | 'INCOMPATIBLE_WRITER_SCHEMA'
  | 'UNEXPECTED_EVENT'
  | 'REGISTRY_UNAVAILABLE'
  | 'REGISTRY_REFUSED'
  | 'NOT_AVRO_SCHEMA'
  | 'SCHEMA_REGISTRATION_REJECTED'
  | 'COMPATIBILITY_MODE_CONFLICT'
  | 'INVALID_EVENT'
  | 'TOPIC_NOT_REGISTERED';

export abstract class ContractError extends KeyflowError {
  abstract override readonly code: ContractErrorCode;
}

/** Where a message came from: what the DLQ's triage headers record. */
export interface MessageLocation {
  topic: string;
  partition: number;
  /** Kafka offset, as a decimal string (offsets are int64). */
  offset: string;
}

/** A message value that cannot be turned into an event. `reason` is a short human sentence. */
export abstract class DecodeError extends ContractError {
  constructor(
    readonly location: MessageLocation,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`cannot decode ${location.topic}[${location.partition}]@${location.offset}: ${reason}`, options);
  }
}

/** A null value (tombstone) where an event is required. Not retryable. */
export class TombstoneError extends DecodeError {
  readonly code = 'TOMBSTONE' as const;
  readonly retryable = retryableOf('TOMBSTONE');
}

/** Bytes that do not start with the Confluent wire format header (magic byte 0 + 4-byte schema id). Not retryable. */
export class MissingMagicByteError extends DecodeError {
  readonly code = 'MISSING_MAGIC_BYTE' as const;
  readonly retryable = retryableOf('MISSING_MAGIC_BYTE');
}

/** The schema id in the header is not known to the registry (HTTP 404). Not retryable. */
export class UnknownSchemaIdError extends DecodeError {
  readonly code = 'UNKNOWN_SCHEMA_ID' as const;
  readonly retryable = retryableOf('UNKNOWN_SCHEMA_ID');
  constructor(
    location: MessageLocation,
    readonly schemaId: number,
  ) {
    super(location, `schema id ${schemaId} is unknown to the registry`);
  }
}

/** The Avro body is truncated, has trailing bytes, or holds a value that cannot be represented (e.g. a long above 2^53). */
export class MalformedPayloadError extends DecodeError {
  readonly code = 'MALFORMED_PAYLOAD' as const;
  readonly retryable = retryableOf('MALFORMED_PAYLOAD');
}

/** The writer's schema cannot be resolved to this service's reader schema (Avro schema resolution fails). */
export class IncompatibleWriterSchemaError extends DecodeError {
  readonly code = 'INCOMPATIBLE_WRITER_SCHEMA' as const;
  readonly retryable = retryableOf('INCOMPATIBLE_WRITER_SCHEMA');
}

/** The message is a valid event, but not one this topic's reader schema lists. */
export class UnexpectedEventError extends DecodeError {
  readonly code = 'UNEXPECTED_EVENT' as const;
  readonly retryable = retryableOf('UNEXPECTED_EVENT');
}

/**
 * The schema id resolves to a schema that is not Avro (a shared registry also holds JSON Schema or Protobuf subjects,
 * Confluent's `schemaType`): this record was not written by an Avro producer of the topic. Not retryable (DLQ).
 */
export class NotAvroSchemaError extends DecodeError {
  readonly code = 'NOT_AVRO_SCHEMA' as const;
  readonly retryable = retryableOf('NOT_AVRO_SCHEMA');
  constructor(
    location: MessageLocation,
    readonly schemaId: number,
    readonly schemaType: string,
  ) {
    super(location, `schema id ${schemaId} is a ${schemaType} schema, not Avro`);
  }
}

/**
 * The registry answered a look-up with a 4xx other than 404 (401/403: credentials, 429: rate limit, ...). Named,
 * and retryable: the record is not at fault, so it must not be dead-lettered; the consumer retries with backoff and
 * reports the condition in /health until the registry answers.
 */
export class RegistryRefusedError extends ContractError {
  readonly code = 'REGISTRY_REFUSED' as const;
  readonly retryable = retryableOf('REGISTRY_REFUSED');
  constructor(
    readonly operation: string,
    readonly status: number,
    body: string,
  ) {
    super(`schema registry refused ${operation}: HTTP ${status} ${body.slice(0, 300)}`);
  }
}

/** The registry could not be reached (network error or HTTP 5xx) for a schema that is not cached. Retryable. */
export class RegistryUnavailableError extends ContractError {
  readonly code = 'REGISTRY_UNAVAILABLE' as const;
  readonly retryable = retryableOf('REGISTRY_UNAVAILABLE');
  constructor(
    readonly operation: string,
    cause: unknown,
  ) {
    super(`schema registry unavailable during ${operation}: ${causeChain(cause)}`, { cause });
  }
}

/**
 * The messages of an error and its causes, `a: b: c`: fetch (undici) says only "fetch failed" and keeps the reason
 * (connection refused, a certificate that does not verify) in `cause`.
 */
function causeChain(e: unknown): string {
  const parts: string[] = [];
  for (let c: unknown = e, depth = 0; c !== undefined && c !== null && depth < 5; depth++) {
    parts.push((c as Error)?.message ?? String(c));
    c = (c as { cause?: unknown }).cause;
  }
  return parts.join(': ');
}

/** The registry refused a schema at startup (incompatible with the subject's history, or invalid). Not retryable. */
export class SchemaRegistrationError extends ContractError {
  readonly code = 'SCHEMA_REGISTRATION_REJECTED' as const;
  readonly retryable = retryableOf('SCHEMA_REGISTRATION_REJECTED');
  constructor(
    readonly subject: string,
    readonly registryReason: string,
    options?: { cause?: unknown },
  ) {
    super(`the registry rejected the schema for subject ${subject}: ${registryReason}`, options);
  }
}

/**
 * A subject's compatibility mode could not be set because the registry holds another one for it (another service,
 * or an operator, set a different mode at the same moment). Not retryable: the deployments disagree on the mode.
 */
export class CompatibilityConflictError extends ContractError {
  readonly code = 'COMPATIBILITY_MODE_CONFLICT' as const;
  readonly retryable = retryableOf('COMPATIBILITY_MODE_CONFLICT');
  constructor(
    readonly subject: string,
    readonly wanted: string,
    readonly actual: string,
    readonly registryAnswer: string,
  ) {
    super(
      `subject ${subject} has compatibility ${actual} but this service wants ${wanted} (the registry refused to change it: ${registryAnswer})`,
    );
  }
}

/** A value to encode does not match its schema; `paths` names the offending fields. Not retryable. */
export class InvalidEventError extends ContractError {
  readonly code = 'INVALID_EVENT' as const;
  readonly retryable = retryableOf('INVALID_EVENT');
  constructor(
    readonly event: string,
    readonly paths: string[],
  ) {
    super(`invalid ${event}: ${paths.length ? paths.join('; ') : 'does not match its schema'}`);
  }
}

/** encode() was called for a topic whose schema was not registered by registerTopics(). A programming error. */
export class TopicNotRegisteredError extends ContractError {
  readonly code = 'TOPIC_NOT_REGISTERED' as const;
  readonly retryable = retryableOf('TOPIC_NOT_REGISTERED');
  constructor(readonly topic: string) {
    super(`topic ${topic} has no registered schema: call registerTopics([...]) at startup`);
  }
}
