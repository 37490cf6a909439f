import * as avsc from 'avsc';
import { Bench } from 'tinybench';
import { EventCodec, newMetadata } from '@keyflow/contracts';
import { schemaSet, type TaskCompleted, Topic } from '@keyflow/schemas';

/**
 * Encode and decode rates of a ~1 KB TaskCompleted through the codec (wire header, registry-resolved writer
 * schema, cached resolver) next to plain avsc on the same type, in the same run.
 *   eval "$(infra/local/stack.sh up)" && npm run -w @keyflow/bench bench:codec
 */
async function main() {
  const registryUrl = process.env.SCHEMA_REGISTRY_URL;
  if (!registryUrl)
    throw new Error('SCHEMA_REGISTRY_URL is not set: eval "$(infra/local/stack.sh up)" first');
  const codec = new EventCodec({ registryUrl, topicPrefix: `bench-${Date.now()}.` });
  await codec.registerTopics([Topic.TASK_RESULTS]);

  const event: TaskCompleted = {
    metadata: newMetadata('TaskCompleted', {
      key: 'run-1',
      correlationId: 'run-1',
      causationId: 'cmd-1',
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    }),
    runId: 'run-1',
    stepId: 'enrich',
    taskType: 'enrich',
    attempt: 1,
    idempotencyKey: 'run-1/enrich/1',
    output: JSON.stringify({
      rows: Array.from({ length: 16 }, (_, i) => ({
        id: i,
        name: `city-${i}`,
        lat: 48.85 + i,
        lon: 2.35 - i,
      })),
    }),
    outputRef: null,
    durationMs: 12,
    workerId: 'bench/1',
    replayed: false,
  };
  const framed = codec.encode(Topic.TASK_RESULTS, 'TaskCompleted', event);
  const plain = avsc.Type.forSchema(
    schemaSet().topicSchema(Topic.TASK_RESULTS) as avsc.Schema,
    { wrapUnions: 'auto', omitRecordMethods: true } as never,
  );
  const datum = { 'dev.keyflow.events.TaskCompleted': event };
  const plainBytes = plain.toBuffer(datum);
  const loc = { topic: 'bench', partition: 0, offset: '0' };

  const bench = new Bench({ time: Number(process.env.BENCH_TIME_MS ?? 2000) });
  bench
    .add('codec encode', () => void codec.encode(Topic.TASK_RESULTS, 'TaskCompleted', event))
    .add('avsc encode', () => void plain.toBuffer(datum))
    .add('codec decode', async () => void (await codec.decode(Topic.TASK_RESULTS, framed, loc)))
    .add('avsc decode', () => void plain.fromBuffer(plainBytes));
  await bench.run();

  const hz = Object.fromEntries(bench.tasks.map((t) => [t.name, t.result?.hz ?? 0]));
  console.log(`event size: ${framed.length} bytes framed (${plainBytes.length} Avro body)`);
  console.table(
    bench.tasks.map((t) => ({
      task: t.name,
      'ops/s': Math.round(t.result?.hz ?? 0),
      'p99 (ms)': t.result?.p99?.toFixed(4),
    })),
  );
  console.log(
    `codec/avsc ratio: encode ${(hz['codec encode'] / hz['avsc encode']).toFixed(2)}, decode ${(hz['codec decode'] / hz['avsc decode']).toFixed(2)}`,
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
