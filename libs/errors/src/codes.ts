/**
 * The closed list of keyflow's error codes (the pattern of platformatic/kafka's closed error code list): every code a
 * keyflow lib, service or the CLI puts on an error, with whether retrying can help and what it means.
 * `KeyflowError.code` is typed by {@link ErrorCode}, so a code not listed here does not compile.
 *
 * `retryable` is the flag every error with the code carries (`true`: the cause is transient, try again; `false`:
 * the same operation fails the same way), or `'per-instance'` where the error says so itself (an HTTP status, an
 * outage that may or may not pass). Codes that reach HTTP answers (`code` of the body) or DLQ records
 * (`x-dlq-error-code`) and TaskFailed records keep their exact text: they are part of the API and DLQ contract.
 *
 * docs/reference/errors.md is generated from this list (`npm run docs:errors`); a test fails when it is stale.
 */
export const ERROR_CODES = {
  // ---- settings (thrown at startup, before anything connects) ----
  ORCHESTRATOR_CONFIG: {
    retryable: false,
    doc: "The orchestrator's configuration is invalid; the message names each bad variable.",
  },
  LOCAL_STEP_HANDLER_MISSING: {
    retryable: false,
    doc: 'A workflow has a local step (`.local`) whose task type has no handler registered in the orchestrator application; it refuses to start.',
  },
  WORKER_CONFIG: {
    retryable: false,
    doc: "The workers' configuration is invalid; the message names each bad variable.",
  },
  REGISTRY_CONNECTION_CONFIG: { retryable: false, doc: 'A schema registry connection setting cannot work.' },
  REDIS_CONNECTION_CONFIG: { retryable: false, doc: 'A Redis connection setting cannot work.' },
  KAFKA_SECURITY_CONFIG: { retryable: false, doc: 'A Kafka connection (TLS/SASL) setting cannot work.' },
  COMPRESSION_CONFIG: { retryable: false, doc: 'KEYFLOW_COMPRESSION names no codec keyflow writes.' },
  DECOMPRESSION_LIMIT_CONFIG: {
    retryable: false,
    doc: 'KEYFLOW_MAX_DECOMPRESSED_BYTES is not a positive integer.',
  },
  BLOB_CONFIG: { retryable: false, doc: 'The blob store configuration is invalid.' },
  CLI_CONFIG: {
    retryable: false,
    doc: "A CLI command's environment is missing or wrong; the message names the variable.",
  },

  // ---- contracts: decoding, encoding, the schema registry ----
  TOMBSTONE: { retryable: false, doc: 'A null value (tombstone) where an event is required.' },
  MISSING_MAGIC_BYTE: {
    retryable: false,
    doc: 'The bytes do not start with the Confluent wire format header.',
  },
  UNKNOWN_SCHEMA_ID: { retryable: false, doc: 'The schema id of a message is not known to the registry.' },
  MALFORMED_PAYLOAD: {
    retryable: false,
    doc: 'The Avro body is truncated, has trailing bytes or holds an unrepresentable value.',
  },
  INCOMPATIBLE_WRITER_SCHEMA: {
    retryable: false,
    doc: "The writer's schema cannot be resolved to the reader's.",
  },
  UNEXPECTED_EVENT: { retryable: false, doc: "A valid event that the topic's reader schema does not list." },
  NOT_AVRO_SCHEMA: {
    retryable: false,
    doc: 'The registry holds a schema of another type (not Avro) under the id.',
  },
  REGISTRY_REFUSED: { retryable: true, doc: 'The registry answered a request with an unexpected refusal.' },
  REGISTRY_UNAVAILABLE: {
    retryable: true,
    doc: 'The registry could not be reached for a schema that is not cached.',
  },
  SCHEMA_REGISTRATION_REJECTED: {
    retryable: false,
    doc: "The registry refused a schema at startup (incompatible with the subject's history).",
  },
  COMPATIBILITY_MODE_CONFLICT: {
    retryable: false,
    doc: "A subject's compatibility mode conflicts with the one keyflow needs.",
  },
  INVALID_EVENT: { retryable: false, doc: 'A value to encode does not match its schema.' },
  NO_BLOB_STORE: {
    retryable: false,
    doc: 'A record refers to a claim-checked blob, but this process has no blob store to read it from.',
  },
  PAYLOAD_NOT_JSON: { retryable: false, doc: 'A payload (inline or read from its blob) is not JSON.' },
  PAYLOAD_INVALID: { retryable: false, doc: 'A parsed payload does not have the shape its reader needs.' },
  TOPIC_NOT_REGISTERED: {
    retryable: false,
    doc: 'An event was encoded for a topic whose schema was never registered (a programming error).',
  },

  // ---- task contracts and workflow definitions ----
  INPUT_SCHEMA: { retryable: false, doc: "A task command's input does not match its task contract." },
  OUTPUT_SCHEMA: { retryable: false, doc: "A handler's output does not match its task contract." },
  INVALID_CONTRACT: { retryable: false, doc: 'A task contract is itself invalid.' },
  INVALID_DEFINITION: {
    retryable: false,
    doc: 'A workflow definition breaks a rule (duplicate step id, bad option).',
  },
  INVALID_TRIGGER: {
    retryable: false,
    doc: 'A topic trigger definition breaks a rule (bad name, topic or option), or names a workflow not registered.',
  },

  // ---- topic triggers: a source record that cannot start or signal a run (its DLQ's x-dlq-error-code) ----
  TRIGGER_RECORD_UNDECODABLE: {
    retryable: false,
    doc: "A trigger's source record whose value is neither Avro the registry knows nor JSON (or is null).",
  },
  TRIGGER_RECORD_UNMAPPABLE: {
    retryable: false,
    doc: "A trigger's function (input, runId, businessKey, run, payload) threw or returned a wrong shape for the record.",
  },
  TRIGGER_INPUT_INVALID: {
    retryable: false,
    doc: "The run input a trigger made from a record fails the workflow's input schema.",
  },
  TRIGGER_NO_SUCH_RUN: {
    retryable: false,
    doc: "A signal trigger's record names a run that did not appear within the trigger's awaitRunMs (or has ended).",
  },
  TRIGGER_SOURCE_MISSING: {
    retryable: true,
    doc: "A topic trigger's source topic does not exist (yet); the trigger starts once it does (/health degraded meanwhile).",
  },
  INVALID_RETRY_POLICY: { retryable: false, doc: 'A retry policy is invalid.' },

  // ---- blobs (claim check) ----
  BLOB_NOT_FOUND: { retryable: false, doc: 'No blob under the key (never written, or swept).' },
  INVALID_BLOB_KEY: { retryable: false, doc: 'A blob key or reference is not of the allowed form.' },
  BLOB_CORRUPT: {
    retryable: false,
    doc: 'The bytes read back do not have the SHA-256 recorded at put time.',
  },
  PAYLOAD_TOO_LARGE: {
    retryable: false,
    doc: "A payload is over its topic's limit and the claim check cannot carry it.",
  },

  // ---- idempotency store (Redis) ----
  IDEMPOTENCY_STORE_UNAVAILABLE: { retryable: true, doc: 'Redis did not answer (down, or reconnecting).' },
  IDEMPOTENCY_STORE_FULL: { retryable: true, doc: 'Redis refused a write at its maxmemory (noeviction).' },
  IDEMPOTENCY_STORE_EVICTS: { retryable: false, doc: 'Redis runs with a maxmemory-policy that evicts keys.' },
  IDEMPOTENCY_FOREIGN_RECORD: {
    retryable: false,
    doc: 'A key of the idempotency key space holds a record keyflow did not write.',
  },

  // ---- Kafka ----
  PARTITION_COUNT_MISMATCH: {
    retryable: false,
    doc: 'A topic exists with another partition count than keyflow needs.',
  },
  TOPICS_STILL_MISSING: {
    retryable: true,
    doc: "Topics a create left missing (the broker's metadata lags); the create is retried.",
  },
  GROUP_ID_MIGRATION: {
    retryable: false,
    doc: 'A consumer group id changed while the old group still holds offsets.',
  },
  PARTITION_REVOKED: {
    retryable: true,
    doc: "A message's partition was revoked while it ran; its new owner redelivers it.",
  },
  CONSUMER_STOPPING: {
    retryable: true,
    doc: 'The consumer is draining; a handler not started by then does not start.',
  },
  BATCH_FAILED: {
    retryable: true,
    doc: 'A batch ended with an error; the consumer seeks back and fetches it again.',
  },
  KAFKAJS_UNPATCHED: { retryable: false, doc: "kafkajs runs without the project's patch." },
  ZSTD_COMPRESSION_FAILED: {
    retryable: 'per-instance',
    doc: 'zstd compression failed (not retryable when this Node has no zstd).',
  },
  DECOMPRESSED_TOO_LARGE: {
    retryable: false,
    doc: 'A record batch decompresses to more than KEYFLOW_MAX_DECOMPRESSED_BYTES.',
  },
  UNDECODABLE_BATCH: {
    retryable: false,
    doc: 'A record batch no codec can decode (DLQ code of its stand-in records).',
  },
  RECORD_TOO_LARGE: { retryable: false, doc: 'A record is larger than the broker or topic accepts.' },

  // ---- orchestrator ----
  INVALID_REQUEST: {
    retryable: false,
    doc: 'A request the API or the engine refuses (unknown workflow, invalid input).',
  },
  CATCHING_UP: {
    retryable: true,
    doc: 'HTTP 503: the run is not known yet; the instance is still reading wf.state.',
  },
  STORE_UNAVAILABLE: { retryable: true, doc: 'HTTP 503: the request key store (Redis) did not answer.' },
  IDEMPOTENCY_KEY_REUSED: {
    retryable: false,
    doc: 'HTTP 422: an Idempotency-Key reused with another request.',
  },
  RUN_ENDED: { retryable: false, doc: 'HTTP 409: the run has ended.' },
  SIGNAL_BUFFER_FULL: { retryable: false, doc: "HTTP 429: the run's signal buffer is full." },
  WEBHOOK_DELIVERY_SEEN: { retryable: false, doc: 'HTTP 409: a webhook delivery id seen before.' },
  DLQ_NOT_FOUND: { retryable: false, doc: 'No such DLQ topic in this deployment (HTTP 404, CLI).' },
  PARKED_INPUTS_FULL: {
    retryable: false,
    doc: 'A run holds ORCHESTRATOR_PARKED_INPUTS_LIMIT parked inputs already; dead-lettered.',
  },
  CHILD_START_REFUSED: {
    retryable: false,
    doc: "A child run's StartRun the engine refused for good (input schema, payload size, definition); fails the parent's step.",
  },
  DEFINITION_FAILED: {
    retryable: false,
    doc: "A definition's function threw while an input was applied; dead-lettered.",
  },
  SNAPSHOT_PER_INPUT: {
    retryable: true,
    doc: 'A snapshot could not be encoded per batch; the batch is applied again one input at a time.',
  },
  READ_MODEL_STOPPED: { retryable: false, doc: "The read model's consumer died for good." },
  CATCH_UP_STALLED: {
    retryable: true,
    doc: 'A take-over waited longer than ORCHESTRATOR_CATCH_UP_STALL_MS; tried again.',
  },

  // ---- workers and task handlers (TaskFailed.error.code, x-dlq-error-code) ----
  TASK_ERROR: { retryable: 'per-instance', doc: 'Default code of a TaskError subclass that sets none.' },
  TASK_RETRYABLE: {
    retryable: true,
    doc: 'Default code of RetryableTaskError: another attempt may succeed.',
  },
  TASK_FAILED: { retryable: false, doc: 'Default code of NonRetryableTaskError: no attempt will succeed.' },
  TASK_INPUT: {
    retryable: false,
    doc: 'Default code of TaskInputError: the command itself is bad; it goes to the DLQ.',
  },
  OUTPUT_NOT_JSON: { retryable: false, doc: 'A handler returned something JSON cannot hold.' },
  TASK_TIMEOUT: { retryable: true, doc: "An attempt ran past the command's timeoutMs." },
  LEASE_HELD: { retryable: true, doc: "Another worker holds the task's lease; the message waits." },
  LEASE_LOST: {
    retryable: true,
    doc: 'The worker lost its idempotency lease while running; retried in place.',
  },
  UNKNOWN_TASK_TYPE: {
    retryable: false,
    doc: "The worker has no handler for the command's task type; dead-lettered.",
  },
  COMPENSATED: {
    retryable: false,
    doc: "The step's compensation fenced its key before the command ran; it never runs.",
  },

  // ---- CLI ----
  API_ERROR: {
    retryable: 'per-instance',
    doc: 'The orchestrator answered with an error status (retryable for 5xx and 429).',
  },
  REPLAY_REFUSED: {
    retryable: false,
    doc: 'A replay that may not be applied (live members, skipped records, re-run effects).',
  },

  // ---- test support ----
  AWAIT_TIMEOUT: {
    retryable: false,
    doc: 'Test support: an awaited condition did not hold before the deadline.',
  },
  STACK_COMMAND_FAILED: { retryable: false, doc: 'Test support: a stack.sh command failed.' },
  TOOL_UNAVAILABLE: { retryable: false, doc: 'Test support: a tool is missing and could not be installed.' },
  INFRA_UNAVAILABLE: {
    retryable: false,
    doc: 'Test support: no endpoints in the environment and no Docker engine.',
  },
} as const satisfies Record<string, { retryable: boolean | 'per-instance'; doc: string }>;

/** One of keyflow's error codes (the keys of {@link ERROR_CODES}). */
export type ErrorCode = keyof typeof ERROR_CODES;

/** The codes whose errors are always retryable, or never (not `'per-instance'`). */
export type FixedErrorCode = {
  [C in ErrorCode]: (typeof ERROR_CODES)[C]['retryable'] extends boolean ? C : never;
}[ErrorCode];

/** Whether `code` is one of keyflow's error codes. */
export const isErrorCode = (code: unknown): code is ErrorCode =>
  typeof code === 'string' && Object.prototype.hasOwnProperty.call(ERROR_CODES, code);

/** The retry flag every error with `code` carries (a code whose flag is the same for all its errors). */
export const retryableOf = <C extends FixedErrorCode>(code: C): (typeof ERROR_CODES)[C]['retryable'] =>
  ERROR_CODES[code].retryable;
