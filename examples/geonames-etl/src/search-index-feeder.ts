/**
 * Example of a NEW consumer added without touching any producer: a search-index feeder. It subscribes to the
 * enriched cities topic as its own consumer group, from the earliest offset (a new group reads full history),
 * upserts each record into an index keyed by its natural key, and when it has caught up with the end of the topic
 * prints what it indexed and writes the index to a JSON file.
 *
 *   eval "$(infra/local/stack.sh up)" && npm start && node -r @swc-node/register examples/geonames-etl/src/search-index-feeder.ts
 *   options: --group <id> (default search-index-feeder), --prefix <topic prefix> (default keyflow.), --out <file>
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Command } from 'commander';
import { Kafka, logLevel } from '@keyflow/kafka';
import { EventCodec } from '@keyflow/contracts';
import type { CityEnriched } from '@keyflow/schemas';
import { Topic } from '@keyflow/schemas';

const opts = new Command('search-index-feeder')
  .option('--group <id>', 'consumer group id', 'search-index-feeder')
  .option('--prefix <prefix>', 'topic prefix', 'keyflow.')
  .option('--out <file>', 'where to write the index', '.keyflow/search-index.json')
  .parse()
  .opts<{ group: string; prefix: string; out: string }>();

async function main() {
  const brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
  const codec = new EventCodec({
    registryUrl: process.env.SCHEMA_REGISTRY_URL ?? 'http://127.0.0.1:8081/apis/ccompat/v7',
    topicPrefix: opts.prefix,
  });
  await codec.registerTopics([Topic.ETL_CITIES_ENRICHED]);
  const topic = codec.physical(Topic.ETL_CITIES_ENRICHED);
  const kafka = new Kafka({ brokers, clientId: 'search-index-feeder', logLevel: logLevel.WARN });
  const admin = kafka.admin();
  await admin.connect();
  const ends = new Map(
    (await admin.fetchTopicOffsets(topic))
      .filter((p) => BigInt(p.high) > 0n)
      .map((p) => [p.partition, BigInt(p.high)]),
  );
  await admin.disconnect();

  const index = new Map<
    string,
    {
      name: string;
      country: string;
      countryName: string | null;
      admin1Name: string | null;
      lat: number;
      lng: number;
    }
  >();
  let read = 0;
  const consumer = kafka.consumer({ groupId: opts.group });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const caughtUp = new Promise<void>((done) => {
    if (ends.size === 0) done();
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        const d = await codec.decode(Topic.ETL_CITIES_ENRICHED, message.value, {
          topic,
          partition,
          offset: message.offset,
        });
        const c = d.value as CityEnriched;
        read++;
        index.set(c.naturalKey, {
          name: c.name,
          country: c.country,
          countryName: c.countryName,
          admin1Name: c.admin1Name,
          lat: c.lat,
          lng: c.lng,
        });
        const end = ends.get(partition);
        if (end !== undefined && BigInt(message.offset) + 1n >= end) ends.delete(partition);
        if (ends.size === 0) done();
      },
    });
  });
  await caughtUp;
  await consumer.disconnect();
  const out = resolve(opts.out);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify(Object.fromEntries(index)));
  console.log(
    JSON.stringify({ group: opts.group, topic, eventsRead: read, distinctKeys: index.size, indexFile: out }),
  );
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
