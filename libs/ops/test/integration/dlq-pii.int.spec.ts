import avsc from 'avsc';
import { createIdempotentProducer, type Producer } from '@keyflow/kafka';
import { EventCodec, toWireFormat } from '@keyflow/contracts';
import { schemaSet, type AvroSchema } from '@keyflow/schemas';
import { TestNamespace } from '@keyflow/testing';
import { PII_MASK } from '@keyflow/workflow';
import { dlqMessage, dlqTopicFor, readDlqRecords } from '../../src';

jest.setTimeout(60_000);

/** The enriched-cities topic as a team would mark it: the city's name is personal data here (a test stand-in). */
const LOGICAL = 'etl.cities.enriched';
function markedSchema(): AvroSchema {
  const schema = structuredClone(schemaSet().topicSchema(LOGICAL)) as {
    fields: Array<Record<string, unknown>>;
  };
  const name = schema.fields.find((f) => f.name === 'name')!;
  name.pii = true;
  return schema as unknown as AvroSchema;
}

describe('DLQ records as operators read them (ops API, console, CLI: readDlqRecords)', () => {
  const ns = new TestNamespace('dlq-pii');
  const producers: Producer[] = [];
  afterAll(async () => {
    await Promise.allSettled(producers.map((p) => p.disconnect()));
    await ns.cleanup();
  });

  const secret = 'Lovelace Residence';
  /** Writes a CityEnriched (name = secret) and a value that is not Avro to the DLQ of `prefix`'s topic. */
  async function deadLetters(prefix: string, writerSchema?: AvroSchema): Promise<string> {
    const topicPrefix = `${ns.prefix}.${prefix}.`;
    const writer = new EventCodec({
      registryUrl: process.env.SCHEMA_REGISTRY_URL!,
      topicPrefix,
      topicSchemas: writerSchema ? { [LOGICAL]: writerSchema } : undefined,
    });
    const [schemaId] = (await writer.registerTopics([LOGICAL])).values();
    const [original] = await ns.createTopics({ name: `${prefix}.${LOGICAL}`, numPartitions: 1 });
    await ns.createTopics({ name: `${prefix}.${LOGICAL}.dlq`, numPartitions: 1 });
    const type = avsc.Type.forSchema(
      schemaSet().topicSchema(LOGICAL) as avsc.Schema,
      {
        wrapUnions: 'auto',
      } as never,
    );
    const city = { ...(type.random() as object), name: secret, country: 'GB' };
    const dead = (value: Buffer, offset: string) =>
      dlqMessage(
        { topic: original, partition: 0, offset, key: Buffer.from('k'), value, headers: {} },
        {
          errorClass: 'SinkRefusedError',
          errorMessage: 'refused',
          attempts: 1,
          firstFailureAt: Date.now(),
          lastFailureAt: Date.now(),
          consumerGroup: 'loaders',
        },
      );
    const producer = createIdempotentProducer(ns.kafka);
    producers.push(producer);
    await producer.connect();
    await producer.send({
      topic: dlqTopicFor(original),
      acks: -1,
      messages: [
        dead(writer.encode(LOGICAL, 'CityEnriched', city as never), '0'),
        // Not Avro at all: its text is what an operator would see of it.
        dead(Buffer.from(`{"name":"${secret}"}`), '1'),
        // The writer's schema id, then a body that does not decode (cut short): its text holds the name as written.
        dead(toWireFormat(schemaId, Buffer.from(`\u0002${secret}`)), '2'),
      ],
    });
    return topicPrefix;
  }
  /** The records as the ops API and the CLI list them, with a read-only codec whose reader schema is `readerSchema`. */
  const read = (topicPrefix: string, readerSchema?: AvroSchema) =>
    readDlqRecords(ns.kafka, dlqTopicFor(`${topicPrefix}${LOGICAL}`), {
      limit: 10,
      codec: new EventCodec({
        registryUrl: process.env.SCHEMA_REGISTRY_URL!,
        topicPrefix,
        topicSchemas: readerSchema ? { [LOGICAL]: readerSchema } : undefined,
      }),
    });

  it('mask a field the Avro schema marks "pii": true, in the reader\'s schema or in the producer\'s, decoded or not', async () => {
    const prefix = await deadLetters('marked', markedSchema());
    // A reader whose own schema marks the field (the service that declared it).
    const [decoded, undecodable] = await read(prefix, markedSchema());
    expect(decoded.value).toMatchObject({ event: 'CityEnriched', value: { name: PII_MASK, country: 'GB' } });
    expect(undecodable.value).toMatchObject({ text: PII_MASK });
    expect(JSON.stringify([decoded, undecodable])).not.toContain('Lovelace');
    // A reader on the catalog's schema, which marks nothing (the CLI of another team): the producer's mark holds, for
    // the record that decodes and for the one written with the producer's schema id that does not.
    const [other, , cutShort] = await read(prefix);
    expect(other.value).toMatchObject({ event: 'CityEnriched', value: { name: PII_MASK, country: 'GB' } });
    expect(cutShort.value).toMatchObject({ text: PII_MASK });
  });

  it('show every field where neither schema marks it', async () => {
    const prefix = await deadLetters('plain');
    const [decoded, undecodable] = await read(prefix);
    expect(decoded.value).toMatchObject({ value: { name: secret } });
    expect(JSON.stringify(undecodable.value)).toContain(secret);
  });
});
