import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { dlqMessage } from '@keyflow/kafka';
import { TestNamespace } from '@keyflow/testing';

jest.setTimeout(90_000);

const ROOT = join(__dirname, '../../../..');

describe('the redrive CLI', () => {
  const ns = new TestNamespace('redrive-cli');
  afterAll(() => ns.cleanup());

  it('on a DLQ written in transactions (committed and aborted): prints its report and exits 0', async () => {
    const [original, dlq] = await ns.createTopics(
      { name: 'wf.requests', numPartitions: 1 },
      { name: 'wf.requests.dlq', numPartitions: 1 },
    );
    const writer = ns.kafka.producer({
      transactionalId: `${ns.prefix}-writer`,
      idempotent: true,
      maxInFlightRequests: 1,
    });
    await writer.connect();
    const msg = (v: string) =>
      dlqMessage(
        {
          topic: original,
          partition: 0,
          offset: '0',
          key: Buffer.from(v),
          value: Buffer.from(v),
          headers: {},
        },
        {
          errorClass: 'InvalidRequestError',
          errorMessage: 'test',
          attempts: 1,
          firstFailureAt: 1,
          lastFailureAt: 1,
          consumerGroup: 'g',
        },
      );
    for (const [values, end] of [
      [['c1', 'c2'], 'commit'],
      [['a1'], 'abort'],
    ] as const) {
      const tx = await writer.transaction();
      await tx.send({ topic: dlq, messages: values.map(msg) });
      await tx[end]();
    }
    await writer.disconnect();

    const cli = spawn(
      process.execPath,
      [
        '-r',
        '@swc-node/register',
        join(ROOT, 'services/workers/src/redrive.ts'),
        '--dlq-topic',
        'wf.requests.dlq',
      ],
      {
        cwd: ROOT,
        env: {
          ...process.env,
          KAFKA_BROKERS: ns.infra.kafkaBrokers.join(','),
          KEYFLOW_TOPIC_PREFIX: `${ns.prefix}.`,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    cli.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    cli.stderr!.on('data', (b: Buffer) => (err += b.toString()));
    const code = await new Promise<number | null>((resolve) => cli.once('exit', resolve));
    expect({ code, err: code === 0 ? '' : err }).toEqual({ code: 0, err: '' });
    // the report is the pretty-printed JSON at the end of stdout (log lines before it are single-line JSON)
    // (a kafkajs log line may still come after it, from the consumer's disconnect)
    const start = out.lastIndexOf('\n{\n') + 1;
    const report = JSON.parse(out.slice(start, out.indexOf('\n}', start) + 2));
    expect(report).toMatchObject({ scanned: 2, moved: 2, byTopic: { [original]: 2 } });
  });
});
