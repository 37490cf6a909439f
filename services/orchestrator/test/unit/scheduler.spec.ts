import { createLogger } from '@keyflow/observability';
import { KafkaJSConnectionError, KafkaJSNumberOfRetriesExceeded } from '@keyflow/kafka';
import { workflow, z } from '@keyflow/workflow';
import { fireTimes, scheduledRunId, Scheduler } from '../../src/engine/scheduler';
import { checkSchedules } from '../../src/runtime';
import { OrchestratorConfigError } from '../../src/config';
import { RequestError } from '../../src/api/runs.service';
import { WorkflowRegistry } from '../../src/workflows/registry';

describe('cron schedules', () => {
  it('reads cron fields in the schedule time zone, across a DST change', () => {
    const s = { id: 'daily', workflow: 'w', cron: '0 9 * * *', timezone: 'Europe/Paris' };
    // 09:00 Paris is 07:00Z in summer (CEST) and 08:00Z in winter (CET); DST ended on 2026-10-25.
    const fires = fireTimes(s, Date.parse('2026-10-23T12:00:00Z'), Date.parse('2026-10-27T00:00:00Z')).map(
      (t) => new Date(t).toISOString(),
    );
    expect(fires).toEqual([
      '2026-10-24T07:00:00.000Z',
      '2026-10-25T08:00:00.000Z',
      '2026-10-26T08:00:00.000Z',
    ]);
  });

  it('refuses a bad expression at startup, naming the schedule', () => {
    expect(
      () =>
        new Scheduler(
          [{ id: 'bad', workflow: 'w', cron: 'every day' }],
          async () => undefined,
          createLogger('t', { level: 'silent' }),
        ),
    ).toThrow(/schedule bad: invalid cron/);
  });

  it('two instances start the same run id per fire time, and a failed start is retried at the next tick', async () => {
    let now = Date.parse('2026-11-29T10:00:00Z');
    const starts: string[][] = [[], []];
    let failOnce = true;
    const sched = [{ id: 's', workflow: 'w', cron: '*/10 * * * * *' }];
    const instances = [0, 1].map(
      (i) =>
        new Scheduler(
          sched,
          async (_s, runId) => {
            if (i === 1 && failOnce) {
              failOnce = false;
              throw new Error('broker unavailable');
            }
            starts[i].push(runId);
          },
          createLogger('t', { level: 'silent' }),
          { now: () => now, catchUp: { mode: 'skip' } },
        ),
    );
    now += 30_000;
    await Promise.all(instances.map((x) => x.tick()));
    await Promise.all(instances.map((x) => x.tick()));
    const expected = [10, 20, 30].map((s) =>
      scheduledRunId('s', Date.parse('2026-11-29T10:00:00Z') + s * 1000),
    );
    expect(starts[0]).toEqual(expected);
    expect(starts[1]).toEqual(expected);
  });

  it('a fire refused for good (a bad input) is skipped; the schedules after it still start their runs', async () => {
    let now = Date.parse('2026-11-29T10:00:00Z');
    const started: string[] = [];
    const scheduler = new Scheduler(
      [
        { id: 'refused', workflow: 'w', cron: '*/10 * * * * *' },
        { id: 'fine', workflow: 'w', cron: '*/10 * * * * *' },
      ],
      async (s, runId) => {
        if (s.id === 'refused') throw new RequestError('input does not match');
        started.push(runId);
      },
      createLogger('t', { level: 'silent' }),
      { now: () => now, catchUp: { mode: 'skip' } },
    );
    now += 20_000;
    await scheduler.tick();
    now += 10_000;
    await scheduler.tick();
    expect(started).toEqual(
      [10, 20, 30].map((s) => scheduledRunId('fine', Date.parse('2026-11-29T10:00:00Z') + s * 1000)),
    );
  });

  it('a fire that fails because kafkajs gave up its retries (retriable: false) is started at a later tick, not lost', async () => {
    let now = Date.parse('2026-11-29T10:00:00Z');
    const started: string[] = [];
    let brokerDown = true;
    const scheduler = new Scheduler(
      [{ id: 's', workflow: 'w', cron: '*/10 * * * * *' }],
      async (_s, runId) => {
        if (brokerDown)
          throw new KafkaJSNumberOfRetriesExceeded(new KafkaJSConnectionError('connection refused'));
        started.push(runId);
      },
      createLogger('t', { level: 'silent' }),
      { now: () => now, catchUp: { mode: 'skip' } },
    );
    now += 20_000;
    await scheduler.tick();
    expect(started).toEqual([]);
    brokerDown = false;
    await scheduler.tick();
    expect(started).toEqual(
      [10, 20].map((s) => scheduledRunId('s', Date.parse('2026-11-29T10:00:00Z') + s * 1000)),
    );
  });

  it('startup refuses a schedule of an unknown workflow or with an input its workflow refuses, naming each', () => {
    const workflows = new WorkflowRegistry().register(
      workflow('report', 1, { input: z.strictObject({ region: z.string(), scheduledAt: z.number() }) })
        .task('t', { type: 'x' })
        .build(),
    );
    expect(() =>
      checkSchedules(workflows, [
        { id: 'ok', workflow: 'report', cron: '* * * * *', input: { region: 'eu' } },
      ]),
    ).not.toThrow();
    let err: unknown;
    try {
      checkSchedules(workflows, [
        { id: 'typo', workflow: 'reprot', cron: '* * * * *' },
        { id: 'bad', workflow: 'report', cron: '* * * * *', input: { region: 7 } },
      ]);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(OrchestratorConfigError);
    expect((err as OrchestratorConfigError).issues).toEqual([
      'schedule typo: unknown workflow reprot',
      expect.stringMatching(/^schedule bad: its input does not match workflow report v1: region: /),
    ]);
  });
});
