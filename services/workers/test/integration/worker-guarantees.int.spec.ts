import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Redis from 'ioredis';
import { eventually } from '@keyflow/testing';
import { WorkerHarness } from './support';
import { taskTopic } from '@keyflow/schemas';

jest.setTimeout(240_000);

const distinctResults = (h: WorkerHarness) =>
  new Set(h.results.items.map((r) => r.value.idempotencyKey)).size;

async function orderPerEntity(h: WorkerHarness): Promise<Map<string, number[]>> {
  const rows = await h.rows<{ entity: string; seq: number }>('select entity, seq from {t}_order order by id');
  const m = new Map<string, number[]>();
  rows.forEach((r) => m.set(r.entity, [...(m.get(r.entity) ?? []), r.seq]));
  return m;
}

describe('worker guarantees under load and failure', () => {
  it('500 keys x 10 sequenced tasks across worker processes, one joining and one leaving mid-run: every key in order, none lost', async () => {
    const h = new WorkerHarness('scale');
    try {
      const keys = Number(process.env.SCALE_KEYS ?? 500);
      const perKey = Number(process.env.SCALE_PER_KEY ?? 10);
      const total = keys * perKey;
      await h.setup(['seq'], 6);
      const [w1] = await Promise.all([h.startWorker(), h.startWorker()]);
      /** Every key's tasks of sequence numbers `from` to `to` (exclusive), in sequence order. */
      const commands = (from: number, to: number) =>
        Array.from({ length: to - from }, (_, i) =>
          Array.from({ length: keys }, (_, k) =>
            h.command('seq', `k${k}`, { entity: `k${k}`, seq: from + i }, { stepId: `s${from + i}` }),
          ),
        ).flat();
      // Sent in three parts (each key's tasks stay in sequence order): the first before the third worker starts,
      // the second as soon as it is up, so its join's rebalance runs while the others have work, the third once it
      // holds partitions, so that it gets work whatever the machine's speed.
      const [second, third] = [Math.floor(perKey * 0.4), Math.floor(perKey * 0.7)];
      await h.send(commands(0, second));
      await eventually('the run under way', () => distinctResults(h), {
        until: (n) => n >= keys,
        intervalMs: 20,
      });
      const w3 = await h.startWorker(); // a third worker joins
      await h.send(commands(second, third));
      await eventually(
        'the third worker holds partitions',
        async () =>
          (await (await fetch(`${await w3.ready}/health`)).json()) as { stats: { assigned: number } },
        { until: (b) => b.stats.assigned > 0, timeoutMs: 60_000, intervalMs: 100 },
      );
      await h.send(commands(third, perKey));
      await eventually(
        'the third worker has work',
        async () => (await h.rows<{ n: string }>('select count(distinct worker) n from {t}_order'))[0].n,
        { until: (n) => Number(n) === 3, timeoutMs: 60_000, intervalMs: 50 },
      );
      w1.kill('SIGTERM'); // one leaves gracefully
      expect(await w1.exited).toBe(0);
      await eventually('all done', () => distinctResults(h), {
        until: (n) => n === total,
        timeoutMs: 180_000,
        intervalMs: 200,
      });

      const order = await orderPerEntity(h);
      expect(order.size).toBe(keys);
      const expected = Array.from({ length: perKey }, (_, i) => i);
      const outOfOrder = [...order].filter(([, seqs]) => JSON.stringify(seqs) !== JSON.stringify(expected));
      expect(outOfOrder.slice(0, 3)).toEqual([]);
      const [{ n }] = await h.rows<{ n: string }>('select count(*) n from {t}_effect');
      expect(Number(n)).toBe(total);
      const workers = await h.rows<{ worker: string }>('select distinct worker from {t}_order');
      expect(workers.length).toBe(3);
    } finally {
      await h.teardown();
    }
  });

  it('a worker killed with SIGKILL in the middle of handlers: every side effect happens exactly once, none is lost', async () => {
    const h = new WorkerHarness('sigkill');
    try {
      const total = 300;
      await h.setup(['slow'], 3);
      // The broker's least session timeout (group.min.session.timeout.ms): the survivor takes the killed worker's
      // partitions once the group coordinator has given up on it.
      const session = { WORKER_SESSION_TIMEOUT_MS: '6000' };
      const [victim] = await Promise.all([h.startWorker(session), h.startWorker(session)]);
      await h.send(
        Array.from({ length: total }, (_, i) =>
          h.command('slow', `e${i % 30}`, { entity: `e${i % 30}`, seq: i, ms: 50 }),
        ),
      );
      await eventually('some done', () => distinctResults(h), { until: (n) => n >= 60, intervalMs: 20 });
      victim.kill('SIGKILL');
      await victim.exited;
      await eventually('all done', () => distinctResults(h), {
        until: (n) => n === total,
        timeoutMs: 120_000,
        intervalMs: 200,
      });
      const [effects] = await h.rows<{ n: string; d: string }>(
        'select count(*) n, count(distinct idempotency_key) d from {t}_effect',
      );
      expect(Number(effects.n)).toBe(total);
      expect(Number(effects.d)).toBe(total);
      const reruns = await h.rows<{ k: string }>(
        'select idempotency_key k from {t}_exec group by 1 having count(*) > 1',
      );
      // Only tasks in flight on the killed worker may run again (their lease expired); each still has one effect.
      console.log(
        `handler re-executions after SIGKILL: ${reruns.length} of ${total} (in flight on the killed worker)`,
      );
      expect(reruns.length).toBeLessThanOrEqual(128);
    } finally {
      await h.teardown();
    }
  });

  it('Redis stopped for 10 s in the middle of a run: no task lost, none executed twice', async () => {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'kf-redis-'));
    const startRedis = () =>
      spawn(
        'redis-server',
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--appendonly',
          'yes',
          '--appendfsync',
          'always',
          '--save',
          '',
          '--dir',
          dir,
        ],
        { stdio: 'ignore' },
      );
    let redis: ChildProcess = startRedis();
    const probe = new Redis(port, '127.0.0.1', {
      lazyConnect: true,
      retryStrategy: () => 50,
      maxRetriesPerRequest: null,
    });
    await probe.ping();
    const h = new WorkerHarness('redis-outage');
    try {
      const total = 400;
      await h.setup(['seq'], 3);
      await h.startWorker({ REDIS_URL: `redis://127.0.0.1:${port}` });
      await h.send(
        Array.from({ length: total }, (_, i) =>
          h.command(
            'seq',
            `r${i % 40}`,
            { entity: `r${i % 40}`, seq: Math.floor(i / 40), ms: 20 },
            { stepId: `s${i}` },
          ),
        ),
      );
      await eventually('some done', () => distinctResults(h), { until: (n) => n >= 80, intervalMs: 20 });
      redis.kill('SIGTERM');
      await new Promise((r) => redis.once('exit', r));
      const doneWhenStopped = distinctResults(h);
      await new Promise((r) => setTimeout(r, 10_000)); // the outage itself
      const doneDuringOutage = distinctResults(h) - doneWhenStopped;
      redis = startRedis();
      await probe.ping();
      await eventually('all done', () => distinctResults(h), {
        until: (n) => n === total,
        timeoutMs: 120_000,
        intervalMs: 200,
      });
      console.log(
        `results during the 10 s Redis outage: ${doneDuringOutage} (in-flight work finishing), after: ${total - doneWhenStopped - doneDuringOutage}`,
      );
      const [exec] = await h.rows<{ n: string; d: string }>(
        'select count(*) n, count(distinct idempotency_key) d from {t}_exec',
      );
      expect(Number(exec.d)).toBe(total);
      expect(Number(exec.n)).toBe(total);
      const order = await orderPerEntity(h);
      expect([...order.values()].every((seqs) => seqs.every((s, i) => s === i))).toBe(true);
    } finally {
      await h.teardown();
      probe.disconnect();
      redis.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('every task on one partition failing past the session timeout does not stall the other partitions', async () => {
    const h = new WorkerHarness('stall');
    try {
      // How long partition 0 keeps failing before its last healthy round: past the session timeout (6 s, the
      // shortest the config allows) and many retries at the longest backoff.
      const failForMs = Number(process.env.STALL_FAIL_MS ?? 7_500);
      await h.setup(['flaky'], 3);
      await h.startWorker({
        WORKER_RETRY_INITIAL_MS: '200',
        WORKER_RETRY_MAX_MS: '2000',
        WORKER_SESSION_TIMEOUT_MS: '6000',
        WORKER_HEARTBEAT_INTERVAL_MS: '1000',
      });
      // They fail until the test inserts the _fix row 'stall'.
      const failing = Array.from({ length: 20 }, (_, i) =>
        h.command('flaky', `bad${i}`, { failUntilFixed: 'stall' }, { maxAttempts: 10_000, timeoutMs: 5_000 }),
      );
      const producer = h.ns.kafka.producer();
      await producer.connect();
      await producer.send({
        topic: h.codec.physical(taskTopic('flaky')),
        acks: -1,
        messages: failing.map((c) => ({
          partition: 0,
          key: c.metadata.key,
          value: h.codec.encode(taskTopic('flaky'), 'TaskCommand', c),
        })),
      });
      /** Milliseconds between the first and the last attempt of the failing tasks so far; -1 before the first. */
      const failingFor = async () => {
        const [r] = await h.rows<{ span: string | null }>(
          'select max(at_ms) - min(at_ms) span from {t}_attempt where idempotency_key = any($1)',
          [failing.map((c) => c.idempotencyKey)],
        );
        return r.span === null ? -1 : Number(r.span);
      };
      const rounds = 3;
      for (let round = 0; round < rounds; round++) {
        // Each round once partition 0 has been failing (and retrying) for its share of failForMs.
        await eventually(`partition 0 failing for ${(failForMs * round) / (rounds - 1)} ms`, failingFor, {
          until: (ms) => ms >= (failForMs * round) / (rounds - 1),
          timeoutMs: failForMs + 30_000,
          intervalMs: 200,
        });
        const healthy = Array.from({ length: 30 }, (_, i) => h.command('flaky', `good${round}-${i}`, {}));
        const sentAt = Date.now();
        await producer.send({
          topic: h.codec.physical(taskTopic('flaky')),
          acks: -1,
          messages: healthy.map((c, i) => ({
            partition: 1 + (i % 2),
            key: c.metadata.key,
            value: h.codec.encode(taskTopic('flaky'), 'TaskCommand', c),
          })),
        });
        await eventually(
          `round ${round} on the healthy partitions`,
          () =>
            healthy.every((c) => h.results.items.some((r) => r.value.idempotencyKey === c.idempotencyKey)),
          { timeoutMs: 15_000 },
        );
        const tookMs = Date.now() - sentAt;
        // Partition 0 is still failing: none of its tasks has completed.
        expect(
          h.results.items.filter(
            (r) =>
              r.event === 'TaskCompleted' && failing.some((c) => c.idempotencyKey === r.value.idempotencyKey),
          ),
        ).toEqual([]);
        console.log(
          `healthy partitions, round ${round}: 30 tasks done in ${tookMs} ms while partition 0 keeps failing`,
        );
      }
      await producer.disconnect();
      await h.rows(`insert into {t}_fix(name) values ('stall')`);
      await eventually(
        'the failing partition recovers once fixed',
        () =>
          failing.every((c) =>
            h.results.items.some(
              (r) => r.value.idempotencyKey === c.idempotencyKey && r.event === 'TaskCompleted',
            ),
          ),
        {
          timeoutMs: 30_000,
          intervalMs: 200,
        },
      );
    } finally {
      await h.teardown();
    }
  });

  it('a handler running three times the session timeout runs once, renewing its lease, with no rebalance', async () => {
    const h = new WorkerHarness('long');
    try {
      await h.setup(['slow'], 1);
      const w = await h.startWorker({
        WORKER_SESSION_TIMEOUT_MS: '6000',
        WORKER_HEARTBEAT_INTERVAL_MS: '1000',
        WORKER_LEASE_MS: '2000',
      });
      const cmd = h.command('slow', 'long', { entity: 'long', seq: 1, ms: 18_000 }, { timeoutMs: 60_000 });
      await h.send([cmd]);
      await eventually(
        'long task done',
        () => h.results.items.find((r) => r.value.idempotencyKey === cmd.idempotencyKey),
        { timeoutMs: 60_000, intervalMs: 200 },
      );
      expect(
        await h.rows('select * from {t}_exec where idempotency_key = $1', [cmd.idempotencyKey]),
      ).toHaveLength(1);
      const health = (await (await fetch(`${await w.ready}/health`)).json()) as { stats: { joins: number } };
      expect(health.stats.joins).toBe(1);
    } finally {
      await h.teardown();
    }
  });
});

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}
