import * as avsc from 'avsc';
import { Agent as HttpsAgent } from 'node:https';
import { SchemaRegistry } from '@kafkajs/confluent-schema-registry';
import { Agent as UndiciAgent, fetch as undiciFetch } from 'undici';
import { avroType } from './avro-type';
import { avroPiiMarks, marksAny, maskWithType, mergeMarks, type PiiMarks } from './pii';
import {
  EVENT_NAMESPACE,
  schemaSet,
  readProblems,
  type AvroSchema,
  type CompatibilityMode,
  type DlqTopic,
  type TriggerTopic,
  type EventName,
  type LogicalTopic,
  type EventsByName,
  type SchemaSet,
} from '@keyflow/schemas';
import {
  CompatibilityConflictError,
  IncompatibleWriterSchemaError,
  InvalidEventError,
  MalformedPayloadError,
  RegistryUnavailableError,
  RegistryRefusedError,
  NotAvroSchemaError,
  SchemaRegistrationError,
  TombstoneError,
  TopicNotRegisteredError,
  UnexpectedEventError,
  UnknownSchemaIdError,
  type MessageLocation,
} from './errors';
import { encodeWireFormat, HEADER_BYTES, MAGIC_BYTE, parseWireFormat } from './wire';
import { subjectFor } from './subjects';

/** A decoded event: its record name and its value, typed by the generated contracts. */
export type DecodedEvent = {
  [E in EventName]: { event: E; value: EventsByName[E]; schemaId: number };
}[EventName];

export interface CodecOptions {
  /** Confluent-compatible registry base URL (Apicurio: `.../apis/ccompat/v7`). */
  registryUrl: string;
  /** HTTP basic auth for every registry request (RFC 7617), e.g. a registry behind an authenticating proxy. */
  registryAuth?: { username: string; password: string };
  /** PEM CA(s) an https registry's certificate chains to (default: Node's CAs); certificates are always verified. */
  registryCa?: string;
  /** Prefix of physical topic names per environment, e.g. `prod.` (default none). */
  topicPrefix?: string;
  /** Overrides the catalog's compatibility mode for every subject this codec registers. */
  compatibility?: CompatibilityMode;
  /** Registry HTTP timeout per request in ms (default 5 000). */
  registryTimeoutMs?: number;
  /**
   * How long {@link EventCodec.registerTopics} keeps retrying a registry that does not answer (network error,
   * timeout, 5xx), in ms, with backoff from 250 ms doubling to 5 s (default 60 000): a service starting while the
   * registry is slow or restarting waits for it instead of exiting.
   */
  registryStartupTimeoutMs?: number;
  /**
   * Pins the schema of a logical topic to something other than the latest versions (e.g. a consumer that has not
   * upgraded yet, or a test of an older service's view). Keys are logical topics.
   */
  topicSchemas?: Partial<Record<LogicalTopic, AvroSchema>>;
}

const NO_MARKS: PiiMarks = { fields: new Map(), types: new Set() };

interface TopicReader {
  subject: string;
  logical: string;
  reader: avsc.Type;
  /** The reader schema as JSON, attributes avsc does not keep included (e.g. `"pii": true` on a field). */
  schema: AvroSchema;
  /** Schema id this service registered for the topic: data it wrote needs no resolver. */
  registeredId: number;
  isUnion: boolean;
  /** Record full name -> short event name, for the events this reader accepts. */
  events: Map<string, EventName>;
}

/**
 * Avro codec over the schema registry, in the Confluent wire format (magic byte 0, 4-byte big-endian schema id,
 * Avro binary body; Confluent docs "Wire format").
 *
 * - Subjects follow TopicNameStrategy: `<physical topic>-value` (the Java serializers' default), see `subjects.ts`.
 * - `registerTopics` sets each subject's compatibility explicitly (catalog default BACKWARD_TRANSITIVE) and registers
 *   this service's schema; a rejection throws {@link SchemaRegistrationError} with the registry's reason, so a
 *   service with an incompatible schema fails at startup.
 * - Writer schemas are cached by id forever (ids are immutable), and resolvers per (writer id, topic), so no
 *   schema or resolver is built per message; concurrent first look-ups of one id share one registry call; a
 *   registry outage does not affect ids already cached.
 */
export class EventCodec {
  private readonly registry: SchemaRegistry;
  private readonly set: SchemaSet;
  private readonly prefix: string;
  private readonly topics = new Map<string, TopicReader>();
  private readonly writers = new Map<number, Promise<avsc.Type>>();
  private readonly writersReady = new Map<number, avsc.Type>();
  /** Writer schemas as JSON by id (attributes avsc drops kept), where the registry gave them as one text. */
  private readonly writerJson = new Map<number, AvroSchema>();
  private readonly readerPii = new Map<string, PiiMarks>();
  private readonly writerPii = new Map<number, PiiMarks>();
  private readonly resolvers = new Map<string, avsc.Resolver | null>();
  /** Registry round trips made for schema ids (for tests and metrics). */
  registryLookups = 0;

  /** Headers and TLS of this codec's own registry requests (the SchemaRegistry client gets the same). */
  private readonly authorization?: string;
  private readonly dispatcher?: UndiciAgent;

  constructor(private readonly opts: CodecOptions) {
    if (opts.registryAuth)
      this.authorization = `Basic ${Buffer.from(`${opts.registryAuth.username}:${opts.registryAuth.password}`).toString('base64')}`;
    if (opts.registryCa) this.dispatcher = new UndiciAgent({ connect: { ca: opts.registryCa } });
    this.registry = new SchemaRegistry({
      host: opts.registryUrl,
      ...(opts.registryAuth ? { auth: opts.registryAuth } : {}),
      ...(opts.registryCa ? { agent: new HttpsAgent({ ca: opts.registryCa, keepAlive: true }) } : {}),
      retry: { retries: 1, initialRetryTimeInSecs: 0.1, maxRetryTimeInSecs: 1 },
      clientId: 'keyflow',
    });
    this.set = schemaSet();
    this.prefix = opts.topicPrefix ?? '';
  }

  /**
   * The catalog's replication for a logical topic (`schemas/catalog.yaml`: `replication_factor`,
   * `min_insync_replicas`, defaults RF 3 / min ISR 2); a DLQ (`<topic>.dlq`) takes its topic's.
   * @throws Error when the topic has no catalog entry.
   */
  replication(logicalTopic: LogicalTopic | DlqTopic): {
    replicationFactor: number;
    minInsyncReplicas: number;
  } {
    const e = this.set.topic(logicalTopic.replace(/\.dlq$/, ''));
    return { replicationFactor: e.replicationFactor, minInsyncReplicas: e.minInsyncReplicas };
  }

  /** Prefix of this environment's physical topic names (KEYFLOW_TOPIC_PREFIX; '' for none). */
  get topicPrefix(): string {
    return this.prefix;
  }

  /** Physical topic name of a logical one (`task.results` -> `<prefix>task.results`). */
  physical(logicalTopic: LogicalTopic | DlqTopic | TriggerTopic): string {
    return `${this.prefix}${logicalTopic}`;
  }

  /** What a topic's reader schema marks `"pii": true` (cached per logical topic). */
  private readerMarks(t: TopicReader): PiiMarks {
    let m = this.readerPii.get(t.logical);
    if (!m) this.readerPii.set(t.logical, (m = avroPiiMarks(t.schema)));
    return m;
  }

  /** What a writer schema marks (cached per id); nothing for an id whose JSON is not known here. */
  private writerMarks(schemaId: number | undefined): PiiMarks {
    const json = schemaId === undefined ? undefined : this.writerJson.get(schemaId);
    if (!json) return NO_MARKS;
    let m = this.writerPii.get(schemaId!);
    if (!m) this.writerPii.set(schemaId!, (m = avroPiiMarks(json)));
    return m;
  }

  /**
   * A decoded event's value with what its topic's reader schema, or the writer schema it was written with, marks
   * `"pii": true` replaced by `[masked]` (see ./pii): for views (DLQ records), never for processing.
   * @throws TopicNotRegisteredError
   */
  maskPii(logicalTopic: LogicalTopic, decoded: DecodedEvent): unknown {
    const t = this.topics.get(logicalTopic);
    if (!t) throw new TopicNotRegisteredError(logicalTopic);
    const marks = mergeMarks(this.readerMarks(t), this.writerMarks(decoded.schemaId));
    return maskWithType(t.reader, marks, decoded.value, `${EVENT_NAMESPACE}.${decoded.event}`);
  }

  /**
   * Whether a record of the topic may carry marked values: its reader schema marks any, or the writer schema its wire
   * header names (when known here) does. For the raw text of a record that did not decode.
   */
  marksPii(logicalTopic: LogicalTopic, value: Buffer | null): boolean {
    const t = this.topics.get(logicalTopic);
    if (!t) return false;
    const id =
      value && value.length >= HEADER_BYTES && value[0] === MAGIC_BYTE ? value.readInt32BE(1) : undefined;
    return marksAny(this.readerMarks(t)) || marksAny(this.writerMarks(id));
  }

  /** Logical topic name of a physical one (`<prefix>task.results` -> `task.results`); undefined without the prefix. */
  logical(physicalTopic: string): string | undefined {
    return physicalTopic.startsWith(this.prefix) ? physicalTopic.slice(this.prefix.length) : undefined;
  }

  /**
   * Registers the schema of each logical topic under its subject, after setting the subject's compatibility mode.
   * @returns schema id per logical topic.
   * @throws SchemaRegistrationError when the registry rejects a schema (incompatible, invalid), naming the subject.
   * @throws RegistryUnavailableError when the registry cannot be reached for registryStartupTimeoutMs (default 60 s).
   */
  async registerTopics(logicalTopics: readonly LogicalTopic[]): Promise<Map<string, number>> {
    const ids = new Map<string, number>();
    for (const logical of logicalTopics) {
      const { state, schema, compatibility } = this.topicState(logical);
      await this.untilRegistryAnswers(() => this.setCompatibility(state.subject, compatibility));
      const id = await this.untilRegistryAnswers(() => this.registerSchema(state.subject, schema));
      this.topics.set(logical, { ...state, registeredId: id });
      this.writersReady.set(id, state.reader);
      this.writerJson.set(id, schema);
      this.writers.set(id, Promise.resolve(state.reader));
      ids.set(logical, id);
    }
    return ids;
  }

  /**
   * Prepares decoding of each logical topic without writing to the registry (for read-only tools such as the CLI):
   * its reader schema comes from the catalog, writer schemas are fetched by id as records name them. Encoding on such
   * a topic is not possible (it has no registered id); a topic already registered is left as it is.
   * @throws Error when a topic is not in the catalog (schemas/catalog.yaml).
   */
  useTopics(logicalTopics: readonly LogicalTopic[]): void {
    for (const logical of logicalTopics)
      if (!this.topics.has(logical)) this.topics.set(logical, this.topicState(logical).state);
  }

  /** A logical topic's state from the catalog (reader type, events, subject), not registered yet. */
  private topicState(logical: LogicalTopic) {
    const entry = this.set.topic(logical);
    const schema = this.opts.topicSchemas?.[logical] ?? this.set.topicSchema(logical);
    const state: TopicReader = {
      subject: subjectFor(this.physical(logical)),
      logical,
      reader: avroType(schema),
      schema,
      registeredId: -1, // until registered: readable, not writable (see encode)
      isUnion: entry.events.length > 1,
      events: new Map<string, EventName>(
        entry.events.map((e) => [`dev.keyflow.events.${e}`, e as EventName] as const),
      ),
    };
    return { state, schema, compatibility: this.opts.compatibility ?? entry.compatibility };
  }

  /** Runs `call`, again with backoff while it fails with RegistryUnavailableError, up to registryStartupTimeoutMs. */
  private async untilRegistryAnswers<T>(call: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + (this.opts.registryStartupTimeoutMs ?? 60_000);
    for (let delay = 250; ; delay = Math.min(delay * 2, 5_000)) {
      try {
        return await call();
      } catch (e) {
        if (!(e instanceof RegistryUnavailableError) || Date.now() + delay > deadline) throw e;
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  /**
   * Sets a subject's compatibility mode (PUT /config/{subject}); Apicurio needs this before the first register.
   * Idempotent under concurrency: services starting together configure the same subject at once, and a registry may
   * refuse the loser (Apicurio 3: HTTP 409 "A rule named 'COMPATIBILITY' already exists"). Any 4xx answer is
   * therefore checked against the subject's config (GET /config/{subject}): already `mode` is success.
   * @throws CompatibilityConflictError when the subject holds another mode after a refused PUT.
   * @throws SchemaRegistrationError when the PUT was refused and the subject has no config to compare.
   * @throws RegistryUnavailableError on a network error or HTTP 5xx.
   */
  async setCompatibility(subject: string, mode: CompatibilityMode): Promise<void> {
    const path = `/config/${encodeURIComponent(subject)}`;
    const res = await this.registryCall('PUT', path, { compatibility: mode });
    if (res.ok) return;
    const current = await this.registryCall('GET', path);
    const level = current.ok
      ? ((current.json as { compatibilityLevel?: string; compatibility?: string }).compatibilityLevel ??
        (current.json as { compatibility?: string }).compatibility)
      : undefined;
    if (level === mode) return;
    if (level !== undefined) throw new CompatibilityConflictError(subject, mode, level, res.text);
    throw new SchemaRegistrationError(
      subject,
      `setting compatibility ${mode}: HTTP ${res.status} ${res.text}`,
    );
  }

  /** `fetch` with this codec's registry credentials and CA (undici's own fetch when a CA is given). */
  private fetch(url: string, init: RequestInit = {}): Promise<Response> {
    const headers = {
      ...(init.headers as Record<string, string> | undefined),
      ...(this.authorization ? { authorization: this.authorization } : {}),
    };
    if (!this.dispatcher) return fetch(url, { ...init, headers });
    return undiciFetch(url, {
      ...(init as object),
      headers,
      dispatcher: this.dispatcher,
    }) as unknown as Promise<Response>;
  }

  /**
   * One registry request with this codec's timeout. Returns status and body of any answer below 500.
   * @throws RegistryUnavailableError on a network error, a timeout or HTTP 5xx.
   */
  private async registryCall(
    method: 'GET' | 'PUT' | 'POST',
    path: string,
    body?: unknown,
  ): Promise<{ ok: boolean; status: number; text: string; json: unknown }> {
    let res: Response;
    try {
      res = await this.fetch(`${this.opts.registryUrl}${path}`, {
        method,
        headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.opts.registryTimeoutMs ?? 5_000),
      });
    } catch (e) {
      throw new RegistryUnavailableError(`${method} ${path}`, e);
    }
    const text = await res.text();
    if (res.status >= 500)
      throw new RegistryUnavailableError(`${method} ${path}`, new Error(`HTTP ${res.status}: ${text}`));
    let json: unknown = undefined;
    try {
      json = JSON.parse(text);
    } catch {
      /* not JSON: callers use the text */
    }
    return { ok: res.ok, status: res.status, text, json };
  }

  /**
   * Encodes an event for a registered logical topic: wire header with this service's schema id, then Avro binary.
   * Synchronous: no registry call.
   * @throws TopicNotRegisteredError, UnexpectedEventError (the topic does not carry that event),
   *         InvalidEventError (value does not match the schema; names the fields).
   */
  encode<E extends EventName>(logicalTopic: LogicalTopic, event: E, value: EventsByName[E]): Buffer {
    const found = this.topics.get(logicalTopic);
    const t = found && found.registeredId >= 0 ? found : undefined; // useTopics: readable, not writable
    if (!t) throw new TopicNotRegisteredError(logicalTopic);
    const fullName = `dev.keyflow.events.${event}`;
    if (!t.events.has(fullName))
      throw new UnexpectedEventError(
        { topic: this.physical(logicalTopic), partition: -1, offset: '-1' },
        `${logicalTopic} does not carry ${event}`,
      );
    const datum = t.isUnion ? { [fullName]: value } : value;
    try {
      return encodeWireFormat(t.registeredId, t.reader, datum);
    } catch {
      const paths: string[] = [];
      t.reader.isValid(datum, {
        // The path and what was there, never the value: the message reaches logs and DLQ headers (personal data).
        errorHook: (path, v, type) =>
          paths.push(
            `${path.join('.') || '(root)'}: expected ${type.typeName}, got ${v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v}`,
          ),
      });
      throw new InvalidEventError(event, paths);
    }
  }

  /**
   * Decodes a message value read from a registered logical topic, resolving the writer's schema to this
   * service's reader schema (defaults applied to fields the writer did not have).
   * @throws TombstoneError, MissingMagicByteError, UnknownSchemaIdError, MalformedPayloadError,
   *         IncompatibleWriterSchemaError, UnexpectedEventError (all non-retryable, with the location);
   *         NotAvroSchemaError (a JSON Schema or Protobuf id) (all non-retryable, with the location);
   *         RegistryUnavailableError (network, timeout, 5xx) or RegistryRefusedError (another 4xx), both retryable,
   *         when the writer id is not cached and the registry does not give it.
   */
  async decode(
    logicalTopic: LogicalTopic,
    value: Buffer | null,
    location: MessageLocation,
  ): Promise<DecodedEvent> {
    const { t, schemaId, body } = this.framed(logicalTopic, value, location);
    const writer = this.writersReady.get(schemaId) ?? (await this.writerType(schemaId, location));
    return this.read(logicalTopic, t, schemaId, writer, body, location);
  }

  /**
   * Decodes a record of a topic keyflow does not own (a topic trigger's source): the Confluent wire format (magic
   * byte 0, 4-byte schema id), read with the writer's own schema as the registry gives it, whatever subject naming
   * (TopicNameStrategy, RecordNameStrategy, ...) its producer registered it under. Bytes become base64 text and
   * a union's branch its value, so the result is plain JSON data.
   * @throws MissingMagicByteError, UnknownSchemaIdError, NotAvroSchemaError, MalformedPayloadError (the record is at
   *   fault: not retryable); RegistryUnavailableError / RegistryRefusedError (retryable) when the writer schema is
   *   not cached and the registry does not give it
   */
  async decodeForeign(value: Buffer, location: MessageLocation): Promise<unknown> {
    const { schemaId, body } = parseWireFormat(value, location);
    const writer = this.writersReady.get(schemaId) ?? (await this.writerType(schemaId, location));
    let datum: unknown;
    try {
      datum = writer.fromBuffer(body);
    } catch (e) {
      throw new MalformedPayloadError(
        location,
        `Avro body (schema id ${schemaId}, ${body.length} bytes): ${(e as Error).message}`,
        { cause: e },
      );
    }
    return plainJson(datum);
  }

  /**
   * {@link decode} without a turn of the event loop, when the writer's schema is already known here (every record
   * after the first of a schema id): `undefined` when it is not (call decode, which fetches it). Throws what decode
   * throws, but for the registry's errors (it never calls the registry).
   */
  decodeIfKnown(
    logicalTopic: LogicalTopic,
    value: Buffer | null,
    location: MessageLocation,
  ): DecodedEvent | undefined {
    const { t, schemaId, body } = this.framed(logicalTopic, value, location);
    const writer = this.writersReady.get(schemaId);
    return writer && this.read(logicalTopic, t, schemaId, writer, body, location);
  }

  /** The registered topic, schema id and Avro body of a record value. @throws as {@link decode} */
  private framed(logicalTopic: string, value: Buffer | null, location: MessageLocation) {
    const t = this.topics.get(logicalTopic);
    if (!t) throw new TopicNotRegisteredError(logicalTopic);
    if (value === null)
      throw new TombstoneError(location, 'null value (tombstone) where an event is required');
    return { t, ...parseWireFormat(value, location) };
  }

  /** The event of an Avro body written with `writer`, read with the topic's reader schema. @throws as {@link decode} */
  private read(
    logicalTopic: string,
    t: NonNullable<ReturnType<typeof this.topics.get>>,
    schemaId: number,
    writer: avsc.Type,
    body: Buffer,
    location: MessageLocation,
  ): DecodedEvent {
    const resolver = this.resolver(t, schemaId, writer, location);
    let datum: unknown;
    try {
      datum = resolver ? t.reader.fromBuffer(body, resolver) : t.reader.fromBuffer(body);
    } catch (e) {
      throw new MalformedPayloadError(
        location,
        `Avro body (schema id ${schemaId}, ${body.length} bytes): ${(e as Error).message}`,
        { cause: e },
      );
    }
    if (!t.isUnion) return { event: [...t.events.values()][0], value: datum, schemaId } as DecodedEvent;
    const [fullName] = Object.keys(datum as object);
    const event = t.events.get(fullName);
    if (!event)
      throw new UnexpectedEventError(location, `record ${fullName} is not an event of ${logicalTopic}`);
    return { event, value: (datum as Record<string, unknown>)[fullName], schemaId } as DecodedEvent;
  }

  private async writerType(schemaId: number, location: MessageLocation): Promise<avsc.Type> {
    let pending = this.writers.get(schemaId);
    if (!pending) {
      this.registryLookups++;
      pending = this.fetchWriter(schemaId, location);
      this.writers.set(schemaId, pending);
      // A failed look-up is not cached: the next message asks again.
      pending.then((t) => this.writersReady.set(schemaId, t)).catch(() => this.writers.delete(schemaId));
    }
    return pending;
  }

  /**
   * GET /schemas/ids/{id} (Confluent API; Apicurio's ccompat): the writer schema of a record.
   * @throws UnknownSchemaIdError on 404; NotAvroSchemaError when `schemaType` is not AVRO (absent means AVRO);
   *   IncompatibleWriterSchemaError when the text is no valid Avro schema (all non-retryable, the record is at
   *   fault); RegistryRefusedError on another 4xx and RegistryUnavailableError on a network error, timeout or 5xx
   *   (retryable: the registry is, not the record).
   */
  private async fetchWriter(schemaId: number, location: MessageLocation): Promise<avsc.Type> {
    const path = `/schemas/ids/${schemaId}`;
    const res = await this.registryCall('GET', path);
    if (res.status === 404) throw new UnknownSchemaIdError(location, schemaId);
    if (!res.ok) throw new RegistryRefusedError(`GET ${path}`, res.status, res.text);
    const body = (res.json ?? {}) as { schema?: string; schemaType?: string; references?: unknown[] };
    const type = body.schemaType ?? 'AVRO';
    if (type.toUpperCase() !== 'AVRO') throw new NotAvroSchemaError(location, schemaId, type);
    if (body.references?.length) {
      // Named references: the registry client resolves them (one call per reference).
      const s = await this.registry.getSchema(schemaId).catch((e) => {
        throw new RegistryUnavailableError(`GET ${path} (references)`, e);
      });
      return avroType((s as unknown as avsc.Type).schema() as AvroSchema);
    }
    try {
      const json = JSON.parse(body.schema ?? '') as AvroSchema;
      const type = avroType(json);
      this.writerJson.set(schemaId, json);
      return type;
    } catch (e) {
      throw new IncompatibleWriterSchemaError(
        location,
        `writer schema id ${schemaId} is not a valid Avro schema: ${(e as Error).message}`,
      );
    }
  }

  private resolver(
    t: TopicReader,
    schemaId: number,
    writer: avsc.Type,
    location: MessageLocation,
  ): avsc.Resolver | null {
    if (schemaId === t.registeredId) return null;
    const key = `${schemaId}|${t.logical}`;
    if (this.resolvers.has(key)) return this.resolvers.get(key)!;
    let resolver: avsc.Resolver;
    try {
      resolver = t.reader.createResolver(writer);
    } catch (e) {
      throw new IncompatibleWriterSchemaError(
        location,
        `writer schema id ${schemaId} cannot be read as ${t.subject}: ${(e as Error).message}`,
      );
    }
    this.resolvers.set(key, resolver);
    return resolver;
  }

  /** Names the fields that break Avro resolution against the subject's latest version (the registry may not). */
  private async explainIncompatibility(subject: string, schema: AvroSchema): Promise<string> {
    try {
      const res = await this.fetch(
        `${this.opts.registryUrl}/subjects/${encodeURIComponent(subject)}/versions/latest`,
      );
      const latest = JSON.parse(((await res.json()) as { schema: string }).schema) as AvroSchema;
      const problems = [
        ...readProblems(schema, latest).map(
          (p) => `new schema cannot read old data at ${p.path}: ${p.reason}`,
        ),
        ...readProblems(latest, schema).map(
          (p) => `old schema cannot read new data at ${p.path}: ${p.reason}`,
        ),
      ];
      return problems.length ? `; by Avro schema resolution: ${problems.join('; ')}` : '';
    } catch {
      return '';
    }
  }

  /**
   * POST /subjects/{subject}/versions. Done over HTTP here because @kafkajs/confluent-schema-registry's register()
   * only accepts a named record as an Avro schema, and TopicNameStrategy needs top-level unions for multi-event topics.
   * @throws SchemaRegistrationError on 409 (incompatible) or 422 (invalid), with the registry's message.
   */
  private async registerSchema(subject: string, schema: AvroSchema): Promise<number> {
    // Several services register the same subject at startup; a registry may refuse the loser of a concurrent first
    // registration (seen with Apicurio: 409). Asking again returns the id of the now-existing identical schema, so a
    // refusal is retried twice before it is taken as the registry's verdict.
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.registerOnce(subject, schema);
      } catch (e) {
        if (!(e instanceof SchemaRegistrationError) || attempt >= 3) throw e;
        await new Promise((r) => setTimeout(r, 100 * attempt + Math.random() * 100));
      }
    }
  }

  private async registerOnce(subject: string, schema: AvroSchema): Promise<number> {
    const path = `/subjects/${encodeURIComponent(subject)}/versions`;
    const res = await this.registryCall('POST', path, { schema: JSON.stringify(schema) });
    if (!res.ok) {
      let reason = (res.json as { message?: string } | undefined)?.message ?? res.text;
      if (res.status === 409) reason += await this.explainIncompatibility(subject, schema);
      throw new SchemaRegistrationError(subject, `HTTP ${res.status}: ${reason}`);
    }
    return (res.json as { id: number }).id;
  }
}

/** Avro data as plain JSON data: Buffers as base64 text, bigints as decimal text, class instances as plain objects. */
function plainJson(v: unknown): unknown {
  if (v === null || typeof v !== 'object') return typeof v === 'bigint' ? v.toString() : v;
  if (Buffer.isBuffer(v)) return v.toString('base64');
  if (v instanceof Date) return v.getTime();
  if (Array.isArray(v)) return v.map(plainJson);
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) out[k] = plainJson(x);
  return out;
}
