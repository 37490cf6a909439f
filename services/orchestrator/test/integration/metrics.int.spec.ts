import { eventually, metricValue } from '@keyflow/testing';
import { OrchestratorHarness, post, TERMINAL_EVENTS } from './support';

jest.setTimeout(120_000);

/**
 * The metrics behind the operators' panel (issue "Operate it"): consumer lag and oldest unread age per group, topic
 * and partition, DLQ depth, runs by workflow and status, chain time by workflow, schedule-to-result time per task
 * type; exported by the orchestrator, as the dashboard and alert rules in infra/observability use them.
 */
describe("the orchestrator exports the operators' metrics", () => {
  const h = new OrchestratorHarness('metrics');
  afterAll(() => h.teardown());

  it('lag and oldest unread age while a command waits for a worker, then none; a DLQ record counted; runs, chain time and step latency', async () => {
    const orch = await h.startOrchestrator({ ORCHESTRATOR_LAG_INTERVAL_MS: '500' });
    const url = await orch.ready;
    await h.readEvents();
    const workers = h.ns.groupId('workers');
    const ended = () => h.events.items.filter((e) => TERMINAL_EVENTS.has(e.event)).length;
    // A run completes, then the workers stop: the next run's first command waits in task.echo.
    let worker = await h.startWorker();
    expect((await post(`${url}/runs`, { workflow: 'three-step', input: {} })).status).toBe(202);
    await eventually('the first run ended', ended, { until: (n) => n === 1, timeoutMs: 30_000 });
    worker.kill('SIGTERM');
    await worker.exited;
    expect((await post(`${url}/runs`, { workflow: 'three-step', input: {} })).status).toBe(202);
    const perPartition = async (name: string, combine: (a: number, b: number) => number) => {
      let v = 0;
      for (let p = 0; p < 4; p++)
        v = combine(
          v,
          await metricValue(url, name, { group: workers, topic: 'task.echo', partition: String(p) }),
        );
      return v;
    };
    const echoLag = () => perPartition('keyflow_consumer_lag_records', (a, b) => a + b);
    await eventually('the waiting command counted as lag', echoLag, {
      until: (n) => n === 1,
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    expect(await perPartition('keyflow_consumer_oldest_unread_age_seconds', Math.max)).toBeGreaterThan(0);

    worker = await h.startWorker();
    await eventually('both runs ended', ended, { until: (n) => n === 2, timeoutMs: 30_000 });
    await eventually('no lag left on task.echo', echoLag, {
      until: (n) => n === 0,
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    expect(
      await metricValue(url, 'keyflow_orchestrator_runs', { workflow: 'three-step', status: 'completed' }),
    ).toBe(2);
    expect(
      await metricValue(url, 'keyflow_orchestrator_run_duration_seconds_count', {
        workflow: 'three-step',
        status: 'completed',
      }),
    ).toBe(2);
    expect(
      await metricValue(url, 'keyflow_orchestrator_step_latency_seconds_count', { task_type: 'echo' }),
    ).toBe(6);

    // An undecodable request goes to wf.requests.dlq, which the monitor counts.
    const producer = h.ns.kafka.producer();
    await producer.connect();
    await producer.send({
      topic: h.codec.physical('wf.requests'),
      messages: [{ key: 'bad', value: Buffer.from('garbage') }],
    });
    await producer.disconnect();
    await eventually(
      'the DLQ record counted',
      () => metricValue(url, 'keyflow_dlq_records', { topic: 'wf.requests.dlq' }),
      {
        until: (n) => n === 1,
        timeoutMs: 30_000,
        intervalMs: 250,
      },
    );
    expect(await metricValue(url, 'keyflow_consumer_lag_scraped_at_seconds', {})).toBeGreaterThan(
      Date.now() / 1000 - 60,
    );
  });
});
