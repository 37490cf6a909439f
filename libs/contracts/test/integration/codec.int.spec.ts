import * as avsc from 'avsc';
import { createServer as createHttpServer } from 'node:http';
import { asLogicalTopic, schemaSet, type EventName, type TaskCompleted } from '@keyflow/schemas';
import { RegistryProxy, TestNamespace } from '@keyflow/testing';
import {
  EventCodec,
  MalformedPayloadError,
  MissingMagicByteError,
  NotAvroSchemaError,
  RegistryRefusedError,
  RegistryUnavailableError,
  SchemaRegistrationError,
  TombstoneError,
  UnknownSchemaIdError,
  newMetadata,
  toWireFormat,
  ContractError,
} from '../../src';

const set = schemaSet();
const at = (offset: number) => ({ topic: 'x', partition: 0, offset: String(offset) });

/** The task.results union as an older service sees it. */
const resultsUnionWith = (taskCompletedVersion: number) =>
  set.topicSchema('task.results', { TaskCompleted: taskCompletedVersion });

function completed(overrides: Partial<TaskCompleted> = {}): TaskCompleted {
  return {
    metadata: newMetadata('TaskCompleted', { key: 'run-1', correlationId: 'run-1', causationId: 'cmd-1' }),
    runId: 'run-1',
    stepId: 'extract',
    taskType: 'extract',
    attempt: 1,
    idempotencyKey: 'run-1/extract/1',
    output: '{"ok":true}',
    outputRef: null,
    durationMs: 12,
    workerId: 'host/1',
    replayed: false,
    ...overrides,
  };
}

describe('the Avro codec over the real registry', () => {
  const ns = new TestNamespace('codec');
  const prefix = `${ns.prefix}.`;
  const registryUrl = ns.infra.schemaRegistryUrl;

  afterAll(() => ns.cleanup());

  it('round-trips every event of every topic in the catalog', async () => {
    const codec = new EventCodec({ registryUrl, topicPrefix: prefix });
    const topics = set.catalog.topics.map((t) => asLogicalTopic(t.topic.replace('<type>', 'extract'))!);
    const ids = await codec.registerTopics(topics);
    expect(ids.size).toBe(topics.length);
    let n = 0;
    for (const [i, entry] of set.catalog.topics.entries()) {
      for (const event of entry.events as EventName[]) {
        const value = avsc.Type.forSchema(
          set.eventSchema(event) as avsc.Schema,
          { omitRecordMethods: true } as never,
        ).random();
        const bytes = codec.encode(topics[i], event, value as never);
        const decoded = await codec.decode(topics[i], bytes, at(n++));
        expect(decoded.event).toBe(event);
        expect(decoded.schemaId).toBe(ids.get(topics[i]));
        expect(JSON.parse(JSON.stringify(decoded.value))).toEqual(JSON.parse(JSON.stringify(value)));
      }
    }
    expect(n).toBe(set.catalog.topics.reduce((s, t) => s + t.events.length, 0));
  });

  it('a value that does not match its schema is refused naming the path and the expected type, never the value', async () => {
    const codec = new EventCodec({ registryUrl, topicPrefix: `${prefix}invalid.` });
    await codec.registerTopics(['task.results']);
    const err = (() => {
      try {
        codec.encode('task.results', 'TaskCompleted', completed({ workerId: 4242_4242 as never }));
      } catch (e) {
        return e as ContractError;
      }
    })();
    expect(err).toMatchObject({ code: 'INVALID_EVENT', retryable: false });
    expect(err!.message).toMatch(/workerId: expected string, got number/);
    expect(err!.message).not.toContain('42424242');
  });

  it('a v1 reader reads a v2 producer, and a v2 reader reads a v1 producer with the defaults applied', async () => {
    const topicPrefix = `${prefix}evolve.`;
    const v1 = new EventCodec({
      registryUrl,
      topicPrefix,
      topicSchemas: { 'task.results': resultsUnionWith(1) },
    });
    const [v1Id] = (await v1.registerTopics(['task.results'])).values();
    const v2 = new EventCodec({ registryUrl, topicPrefix });
    const [v2Id] = (await v2.registerTopics(['task.results'])).values();
    expect(v2Id).not.toBe(v1Id);

    const fromV2 = v2.encode('task.results', 'TaskCompleted', completed({ replayed: true }));
    const readByV1 = await v1.decode('task.results', fromV2, at(1));
    expect(readByV1.event).toBe('TaskCompleted');
    expect(readByV1.schemaId).toBe(v2Id);
    expect(readByV1.value).not.toHaveProperty('replayed');
    expect(readByV1.value).toMatchObject({ runId: 'run-1', output: '{"ok":true}' });

    const { replayed: _omit, ...v1Value } = completed();
    const fromV1 = v1.encode('task.results', 'TaskCompleted', v1Value as TaskCompleted);
    const readByV2 = await v2.decode('task.results', fromV1, at(2));
    expect(readByV2.schemaId).toBe(v1Id);
    expect(readByV2.value).toMatchObject({ runId: 'run-1', replayed: false });
  });

  it('the registry rejects an incompatible schema at registration, naming the subject', async () => {
    const topicPrefix = `${prefix}breaking.`;
    await new EventCodec({ registryUrl, topicPrefix }).registerTopics(['task.results']);
    const [tc, tf] = set.topicSchema('task.results') as Array<{ fields: unknown[] }>;
    const broken = { ...tc, fields: [...tc.fields, { name: 'tenant', type: 'string' }] }; // no default
    const codec = new EventCodec({
      registryUrl,
      topicPrefix,
      topicSchemas: { 'task.results': [broken, tf] },
    });
    const err = await codec.registerTopics(['task.results']).catch((e) => e);
    expect(err).toBeInstanceOf(SchemaRegistrationError);
    expect(err.retryable).toBe(false);
    expect(err.message).toContain(`${topicPrefix}task.results-value`);
    expect(err.message).toMatch(
      /TaskCompleted\.tenant: field tenant is missing from the writer's data and has no default/,
    );
    console.log(`registry's reason for a field added without a default: ${err.registryReason}`);

    const typeChanged = {
      ...tc,
      fields: (tc.fields as Array<{ name: string }>).map((f) =>
        f.name === 'attempt' ? { ...f, type: 'string' } : f,
      ),
    };
    const codec2 = new EventCodec({
      registryUrl,
      topicPrefix,
      topicSchemas: { 'task.results': [typeChanged, tf] },
    });
    await expect(codec2.registerTopics(['task.results'])).rejects.toBeInstanceOf(SchemaRegistrationError);
  });

  describe('bad bytes get a typed, non-retryable error naming where they came from', () => {
    const codec = new EventCodec({ registryUrl, topicPrefix: `${prefix}bad.` });
    let id = 0;
    let good: Buffer;
    beforeAll(async () => {
      [id] = (await codec.registerTopics(['task.results'])).values();
      good = codec.encode('task.results', 'TaskCompleted', completed());
    });

    const cases: Array<[string, () => Buffer | null, new (...a: never[]) => ContractError, RegExp]> = [
      ['a tombstone', () => null, TombstoneError, /tombstone/],
      [
        'bytes without the magic byte',
        () => Buffer.from('{"json":true}'),
        MissingMagicByteError,
        /0x7b, not the magic byte/,
      ],
      [
        'fewer bytes than the header',
        () => Buffer.from([0, 0, 1]),
        MissingMagicByteError,
        /shorter than the 5-byte header/,
      ],
      [
        'an unknown schema id',
        () => toWireFormat(2_000_000_000, good.subarray(5)),
        UnknownSchemaIdError,
        /schema id 2000000000 is unknown/,
      ],
      ['a truncated payload', () => good.subarray(0, good.length - 4), MalformedPayloadError, /truncated/],
      [
        'trailing bytes',
        () => Buffer.concat([good, Buffer.from([1, 2, 3])]),
        MalformedPayloadError,
        /trailing/,
      ],
    ];
    it.each(cases)('%s', async (_name, bytes, type, reason) => {
      const err = await codec
        .decode('task.results', bytes(), { topic: 'orders', partition: 2, offset: '41' })
        .catch((e) => e);
      expect(err).toBeInstanceOf(type);
      expect(err.retryable).toBe(false);
      expect(err.message).toMatch(reason);
      expect(err.message).toContain('orders[2]@41');
    });

    it('a long beyond 2^53 is refused rather than rounded', async () => {
      // durationMs is the only long in TaskCompleted outside metadata; write it with a plain long writer type.
      const writer = avsc.Type.forSchema(
        set.topicSchema('task.results') as avsc.Schema,
        { wrapUnions: 'auto' } as never,
      );
      const body = writer.toBuffer({
        'dev.keyflow.events.TaskCompleted': completed({ durationMs: 2 ** 52 }),
      });
      // 2^52 is the largest avsc writes; scale the zig-zag varint of durationMs up to 2^62 by hand.
      const small = avsc.Type.forSchema('long').toBuffer(2 ** 52);
      const big = Buffer.from([0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]); // zig-zag 2^63 -> 2^62
      const at52 = body.indexOf(small);
      expect(at52).toBeGreaterThan(0);
      const tampered = Buffer.concat([body.subarray(0, at52), big, body.subarray(at52 + small.length)]);
      const err = await codec.decode('task.results', toWireFormat(id, tampered), at(7)).catch((e) => e);
      expect(err).toBeInstanceOf(MalformedPayloadError);
      expect(err.message).toMatch(/precision/);
    });
  });

  describe('registry outages', () => {
    const proxy = new RegistryProxy(new URL(registryUrl));
    beforeAll(() => proxy.start());
    afterAll(() => proxy.stop().catch(() => undefined));

    it('concurrent first look-ups of one schema id make one registry call, and cached ids decode while the registry is down', async () => {
      const topicPrefix = `${prefix}outage.`;
      const old = new EventCodec({
        registryUrl,
        topicPrefix,
        topicSchemas: { 'task.results': resultsUnionWith(1) },
      });
      await old.registerTopics(['task.results']);
      const { replayed: _r, ...v1Value } = completed();
      const fromOld = old.encode('task.results', 'TaskCompleted', v1Value as TaskCompleted);
      const anotherUnknown = toWireFormat(
        old['topics'].get('task.results')!.registeredId + 100_000,
        fromOld.subarray(5),
      );

      const codec = new EventCodec({ registryUrl: proxy.url(), topicPrefix });
      await codec.registerTopics(['task.results']);
      // Without a turn of the event loop only what is known here: an old writer's id is not, yet.
      expect(codec.decodeIfKnown('task.results', fromOld, at(0))).toBeUndefined();
      const decoded = await Promise.all(
        Array.from({ length: 50 }, (_, i) => codec.decode('task.results', fromOld, at(i))),
      );
      expect(decoded.every((d) => d.event === 'TaskCompleted')).toBe(true);
      expect(codec.registryLookups).toBe(1);

      await proxy.stop();
      await expect(codec.decode('task.results', fromOld, at(60))).resolves.toMatchObject({
        event: 'TaskCompleted',
      });
      expect(codec.decodeIfKnown('task.results', fromOld, at(60))).toEqual(decoded[0]);
      expect(codec.decodeIfKnown('task.results', anotherUnknown, at(61))).toBeUndefined();
      expect(() => codec.decodeIfKnown('task.results', null, at(61))).toThrow(TombstoneError);
      const down = await codec.decode('task.results', anotherUnknown, at(61)).catch((e) => e);
      expect(down).toBeInstanceOf(RegistryUnavailableError);
      expect(down.retryable).toBe(true);

      await proxy.start(proxy.port);
      const back = await codec.decode('task.results', anotherUnknown, at(62)).catch((e) => e);
      expect(back).toBeInstanceOf(UnknownSchemaIdError); // the registry answers again: now a definite 404
    });
  });

  describe('what a registry answers about a schema id', () => {
    it('a schema id that resolves to a JSON Schema (a shared registry) is a non-retryable NOT_AVRO_SCHEMA naming the id and type', async () => {
      const codec = new EventCodec({ registryUrl, topicPrefix: `${prefix}json.` });
      await codec.registerTopics(['task.results']);
      const subject = `${prefix}json-schema-subject-value`;
      const res = await fetch(`${registryUrl}/subjects/${encodeURIComponent(subject)}/versions`, {
        method: 'POST',
        headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' },
        body: JSON.stringify({
          schemaType: 'JSON',
          // Apicurio tells the artifact type from the content: a JSON Schema needs its $schema.
          schema: JSON.stringify({ $schema: 'http://json-schema.org/draft-07/schema#', type: 'object' }),
        }),
      });
      expect(res.status).toBe(200);
      const { id } = (await res.json()) as { id: number };
      const err = await codec
        .decode('task.results', toWireFormat(id, Buffer.from('{}')), at(3))
        .catch((e) => e);
      expect(err).toBeInstanceOf(NotAvroSchemaError);
      expect(err).toMatchObject({
        code: 'NOT_AVRO_SCHEMA',
        retryable: false,
        schemaId: id,
        schemaType: 'JSON',
      });
      expect(err.message).toContain('x[0]@3');
    });

    /** A registry (or the auth proxy in front of it) that answers every request with `status`. */
    async function answering(status: number): Promise<{ url: string; close: () => Promise<void> }> {
      const server = createHttpServer((_req, res) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error_code: status, message: `answered ${status}` }));
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      const { port } = server.address() as { port: number };
      return { url: `http://127.0.0.1:${port}`, close: () => new Promise((r) => server.close(() => r())) };
    }

    it.each([401, 403, 429])(
      'a %i answer is a named REGISTRY_REFUSED with the status, retried (the record is not at fault, never dead-lettered)',
      async (status) => {
        const registry = await answering(status);
        try {
          const codec = new EventCodec({ registryUrl: registry.url, topicPrefix: `${prefix}refused.` });
          codec['topics'].set('task.results', { logical: 'task.results' } as never);
          const err = await codec
            .decode('task.results', toWireFormat(77, Buffer.from([0])), at(4))
            .catch((e) => e);
          expect(err).toBeInstanceOf(RegistryRefusedError);
          expect(err).toMatchObject({ code: 'REGISTRY_REFUSED', retryable: true, status });
          expect(err.message).toContain(`HTTP ${status}`);
        } finally {
          await registry.close();
        }
      },
    );

    it('a 5xx answer is REGISTRY_UNAVAILABLE, retried', async () => {
      const registry = await answering(503);
      try {
        const codec = new EventCodec({ registryUrl: registry.url, topicPrefix: `${prefix}down.` });
        codec['topics'].set('task.results', { logical: 'task.results' } as never);
        const err = await codec
          .decode('task.results', toWireFormat(78, Buffer.from([0])), at(5))
          .catch((e) => e);
        expect(err).toBeInstanceOf(RegistryUnavailableError);
        expect(err).toMatchObject({ code: 'REGISTRY_UNAVAILABLE', retryable: true });
      } finally {
        await registry.close();
      }
    });
  });
});
