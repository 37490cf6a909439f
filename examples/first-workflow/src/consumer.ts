import { EventCodec, registryConnectionFromEnv } from '@keyflow/contracts';
import { createKafka, kafkaSecurityFromEnv, subscribeWhenReady } from '@keyflow/kafka';
import { createLogger } from '@keyflow/observability';
import type { RunCompleted, RunStarted } from '@keyflow/schemas';
import { greet } from './workflow';
import { Topic } from '@keyflow/schemas';

/**
 * 5. A new consumer of the workflow's events, added without touching any producer: its own consumer group on
 * wf.events (the run lifecycle topic, keyed by run id), from the earliest offset. It prints one JSON line per
 * completed `greet` run. Settings: the services' (KAFKA_BROKERS, SCHEMA_REGISTRY_URL, KEYFLOW_TOPIC_PREFIX, the
 * SASL/TLS variables), GREETINGS_GROUP_ID (default greetings-feed).
 */
async function main() {
  const env = process.env;
  const log = createLogger('greetings-feed');
  const codec = new EventCodec({
    ...registryConnectionFromEnv(env),
    topicPrefix: env.KEYFLOW_TOPIC_PREFIX ?? '',
  });
  const kafka = createKafka({
    brokers: (env.KAFKA_BROKERS ?? '127.0.0.1:9092').split(','),
    clientId: 'greetings-feed',
    logger: log,
    security: kafkaSecurityFromEnv(env),
  });
  codec.useTopics([Topic.WF_EVENTS]);
  const topic = codec.physical(Topic.WF_EVENTS);
  const consumer = kafka.consumer({ groupId: env.GREETINGS_GROUP_ID ?? 'greetings-feed' });
  await consumer.connect();
  // The orchestrator creates wf.events: a consumer started before it waits for the topic (up to 5 minutes).
  await subscribeWhenReady(consumer, topic, true, 300_000);
  // Events of one run share its key, so they arrive in order: its RunStarted before its RunCompleted.
  const greetRuns = new Set<string>();
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      const e = await codec.decode(Topic.WF_EVENTS, message.value, {
        topic,
        partition,
        offset: message.offset,
      });
      if (e.event === 'RunStarted' && (e.value as RunStarted).workflow === greet.name)
        greetRuns.add((e.value as RunStarted).runId);
      if (e.event === 'RunCompleted' && greetRuns.delete((e.value as RunCompleted).runId)) {
        const done = e.value as RunCompleted;
        console.log(JSON.stringify({ runId: done.runId, output: JSON.parse(done.output) }));
      }
    },
  });
  log.info({ topic }, 'greetings feed consuming');
  for (const signal of ['SIGTERM', 'SIGINT'] as const)
    process.once(signal, () => void consumer.disconnect().then(() => process.exit(0)));
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
