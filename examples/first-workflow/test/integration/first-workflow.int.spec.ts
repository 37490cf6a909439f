import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Collector, startServiceProcess, type ServiceProcess } from '@keyflow/testing';

/**
 * The tutorial (README "Your first workflow"), run as its reader runs it: the orchestrator, the worker and the new
 * consumer from this workspace's files, against the stack; a run started over HTTP ends in the consumer's output.
 */
const src = join(__dirname, '..', '..', 'src');
const prefix = `tutorial-${randomBytes(4).toString('hex')}.`;
const env = {
  KEYFLOW_TOPIC_PREFIX: prefix,
  ORCHESTRATOR_GROUP_ID: `${prefix}orchestrator`,
  WORKER_GROUP_ID: `${prefix}workers`,
  GREETINGS_GROUP_ID: `${prefix}greetings-feed`,
};

describe('the tutorial: your first workflow', () => {
  const started: ServiceProcess[] = [];
  const feed = new Collector<{ runId: string; output: { text: string; messageId: string } }>();
  let url: string;

  beforeAll(async () => {
    const orchestrator = startServiceProcess(join(src, 'orchestrator.ts'), env, 'orchestrator ready');
    const worker = startServiceProcess(join(src, 'worker.ts'), env, 'worker ready');
    const consumer = startServiceProcess(join(src, 'consumer.ts'), env, 'greetings feed consuming', {
      onLine: (l) => l.startsWith('{"runId"') && feed.push(JSON.parse(l)),
    });
    started.push(orchestrator, worker, consumer);
    [url] = await Promise.all([orchestrator.ready, worker.ready, consumer.ready]);
  }, 180_000);

  afterAll(async () => {
    started.forEach((s) => s.proc.kill('SIGTERM'));
    await Promise.all(started.map((s) => s.exited));
  }, 60_000);

  const start = (input: unknown) =>
    fetch(`${url}/runs`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ workflow: 'greet', input }),
    });

  it('a run of the new workflow completes through the new handlers and reaches the new consumer', async () => {
    const res = await start({ name: 'Ada', email: 'ada@example.com' });
    expect(res.status).toBe(202);
    const { runId } = (await res.json()) as { runId: string };
    const [done] = await feed.wait(1, 60_000);
    expect(done.runId).toBe(runId);
    expect(done.output.text).toBe('Hello Ada!');
    expect(done.output.messageId).toBe(`msg-${runId}/send`);
  });

  it("an input that breaks the workflow's schema is refused with 400 naming the field", async () => {
    const res = await start({ name: 'Ada', email: 'not-an-email' });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { errors: Array<{ path: string }> };
    expect(body.errors.map((e) => e.path)).toEqual(['input.email']);
  });
});
