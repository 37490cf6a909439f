import { AssignerProtocol } from '@keyflow/kafka';
import { AwaitTimeoutError, eventually } from '../await';
import { OrchestratorHarness, TERMINAL_EVENTS, post } from '../harness/orchestrator';
import type { ServiceProcess } from '../service-process';
import { Topic } from '@keyflow/schemas';

/**
 * The scale-out scenario, shared by the CI test (services/orchestrator/test/integration/scale-out.int.spec.ts) and the full matrix (`npm run test:scale`,
 * scripts/scale-matrix.ts): orchestrator instances and workers started at the same moment on new topics, runs of
 * `three-step` and `order-saga` started over HTTP spread across the instances, one instance added and one of the
 * first ones SIGKILLed mid-load, every run awaited. It measures and returns; the caller asserts or prints.
 */
export interface ScaleScenario {
  /** Test namespace label (topics, groups and Redis keys get a fresh prefix). */
  label: string;
  /** Orchestrator instances started together at the beginning (>= 1). */
  orchestrators: number;
  /** Worker processes started together with them. */
  workers: number;
  /** Partitions of every run-keyed topic (wf.requests, task.results, wf.events, wf.state) and task topic. */
  partitions: number;
  /** `three-step` runs started. */
  runs: number;
  /** `order-saga` runs started (no failure injected: all four steps complete). */
  sagas: number;
  /** ORCHESTRATOR_SESSION_TIMEOUT_MS of every instance (how long the group takes to notice the SIGKILL). */
  sessionTimeoutMs: number;
  /** Deadline in ms for every run to end after the last one was started. */
  timeoutMs: number;
  /**
   * The definitions of `three-step` and `order-saga` the orchestrators run (the orchestrator's built-in workflows):
   * a completed run must have completed exactly their steps.
   */
  workflows: readonly ScaleWorkflow[];
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

/** One consumer-group assignment as the broker reports it (DescribeGroups), decoded. */
export interface GroupSnapshot {
  /** Why it was taken: `start`, `added`, `killed`. */
  phase: string;
  /** Whether the group became Stable with the expected member count before the deadline (else: the last seen). */
  settled: boolean;
  /** client id (keyflow-orchestrator-<instance>) -> physical topic -> partitions. */
  members: Record<string, Record<string, number[]>>;
  /** Partitions p whose wf.requests and task.results copies are not on one member, or not assigned at all. */
  split: number[];
  /** Partitions of wf.requests whose owner changed since the previous snapshot (each costs a fence + restore). */
  moved: number;
}

export interface ScaleReport {
  instances: number;
  workers: number;
  /** Runs started (three-step + order-saga). */
  runs: number;
  /** Runs with a RunCompleted on wf.events. */
  completed: number;
  /** Runs with no terminal event by the deadline. */
  lost: string[];
  /** Runs that ended otherwise than completed (failed, compensated, cancelled). */
  notCompleted: string[];
  /** `runId/stepId xN` for every (run, step) with more than one StepCompleted on wf.events. */
  duplicateStepCompleted: string[];
  /** `runId: got a,b` for completed runs whose StepCompleted steps are not exactly the definition's. */
  wrongSteps: string[];
  /** Seconds from the first run started to the last run ended (or the deadline). */
  seconds: number;
  /** `<process>: exit <code>` for every process other than the SIGKILLed one that exited. */
  exits: string[];
  /** The group's assignment after the start, after the instance was added, after the SIGKILL. */
  snapshots: GroupSnapshot[];
  /** The partitions the SIGKILLed instance held (in the `added` snapshot): the least a rebalance must move. */
  victimPartitions: number[];
}

/** A workflow definition as far as the scenario reads it: its name and its steps' ids. */
export interface ScaleWorkflow {
  name: string;
  steps: ReadonlyArray<{ id: string }>;
}

const stepsOf = (workflows: readonly ScaleWorkflow[], name: string): string[] => {
  const def = workflows.find((w) => w.name === name);
  if (!def) throw new Error(`no built-in workflow ${name}`);
  return def.steps.map((s) => s.id);
};
export const THREE_STEP = 'three-step';
export const ORDER_SAGA = 'order-saga';

/**
 * Reads the group's assignment from the broker once it is Stable with `size` members (or, at the deadline, the last
 * one seen, with `settled: false`).
 */
async function stableAssignment(
  h: OrchestratorHarness,
  groupId: string,
  size: number,
  phase: string,
  partitions: number,
  timeoutMs: number,
  previous?: GroupSnapshot,
): Promise<GroupSnapshot> {
  const admin = await h.ns.getAdmin();
  const requests = h.codec.physical(Topic.WF_REQUESTS);
  const results = h.codec.physical(Topic.TASK_RESULTS);
  const describe = async () => (await admin.describeGroups([groupId])).groups[0];
  const isSettled = (g?: Awaited<ReturnType<typeof describe>>) =>
    g?.state === 'Stable' && g.members.length === size;
  let group: Awaited<ReturnType<typeof describe>>;
  try {
    group = await eventually(`group ${groupId} Stable with ${size} members (${phase})`, describe, {
      until: isSettled,
      timeoutMs,
      intervalMs: 200,
    });
  } catch (e) {
    if (!(e instanceof AwaitTimeoutError)) throw e;
    group = await describe();
  }
  const members: GroupSnapshot['members'] = {};
  for (const m of group.members)
    members[m.clientId] = AssignerProtocol.MemberAssignment.decode(m.memberAssignment)?.assignment ?? {};
  const owners = (snapshot: GroupSnapshot['members'], topic: string, p: number) =>
    Object.entries(snapshot)
      .filter(([, a]) => (a[topic] ?? []).includes(p))
      .map(([id]) => id);
  const split: number[] = [];
  let moved = 0;
  for (let p = 0; p < partitions; p++) {
    const [r, t] = [owners(members, requests, p), owners(members, results, p)];
    if (r.length !== 1 || t.length !== 1 || r[0] !== t[0]) split.push(p);
    if (previous && owners(previous.members, requests, p).join() !== r.join()) moved++;
  }
  return { phase, settled: isSettled(group), members, split, moved };
}

/** Run id -> workflow name of every run started. */
const workflowOf = new Map<string, string>();

/**
 * Starts runs over HTTP, spread round-robin over `urls`, 50 at a time. An instance that does not answer (it died:
 * the report lists it) is skipped for the next one, with the same Idempotency-Key. Returns their run ids.
 */
async function startRuns(urls: string[], workflow: string, n: number, tag: string): Promise<string[]> {
  const ids: string[] = [];
  const startOne = async (k: number) => {
    const input = workflow === ORDER_SAGA ? { orderId: `${tag}-${k}`, amount: 1 + (k % 97) } : { n: k };
    for (let i = 0; ; i++) {
      try {
        return await post(
          `${urls[(k + i) % urls.length]}/runs`,
          { workflow, input },
          { 'Idempotency-Key': `${tag}-${k}` },
        );
      } catch (e) {
        if (i + 1 >= urls.length) throw e;
      }
    }
  };
  for (let i = 0; i < n; i += 50) {
    const batch = await Promise.all(Array.from({ length: Math.min(50, n - i) }, (_, j) => startOne(i + j)));
    for (const r of batch) {
      if (r.status !== 202) throw new Error(`POST /runs answered ${r.status}: ${JSON.stringify(r.body)}`);
      ids.push(r.body.runId as string);
      workflowOf.set(r.body.runId as string, workflow);
    }
  }
  return ids;
}

/**
 * Runs the scenario and measures. Throws only when the setup itself fails (a process that does not get ready, a
 * group that never settles); what the runs did is in the report.
 */
export async function runScaleScenario(s: ScaleScenario): Promise<ScaleReport> {
  const log = s.log ?? (() => undefined);
  const h = new OrchestratorHarness(s.label);
  const n = String(s.partitions);
  const env = {
    ORCHESTRATOR_PARTITIONS: n,
    TASK_PARTITIONS: n,
    WORKER_TASK_PARTITIONS: n,
    WORKER_RESULT_PARTITIONS: n,
    ORCHESTRATOR_SESSION_TIMEOUT_MS: String(s.sessionTimeoutMs),
  };
  const groupId = h.env().ORCHESTRATOR_GROUP_ID;
  const settle = s.sessionTimeoutMs * 5;
  const orchestrators = new Map<string, ServiceProcess>();
  // Waits for `count()` to reach `target`; stuck runs are what the report measures, so a timeout only moves on.
  const progressOrGoOn = async (
    what: string,
    count: () => number,
    target: number,
    timeoutMs = s.timeoutMs / 3,
  ) => {
    try {
      await eventually(what, count, { until: (c) => c >= target, timeoutMs, intervalMs: 20 });
    } catch (e) {
      if (!(e instanceof AwaitTimeoutError)) throw e;
      log(`${what}: stuck at ${count()} of ${target}; going on`);
    }
  };
  const snapshots: GroupSnapshot[] = [];
  try {
    // Everything at the same moment on topics nobody created yet: the startup races of a fresh deployment.
    const started = await Promise.all([
      ...Array.from({ length: s.orchestrators }, (_, i) =>
        h.startOrchestrator({ ...env, ORCHESTRATOR_INSTANCE_ID: `o${i}` }).then((p) => ['o' + i, p] as const),
      ),
      ...Array.from({ length: s.workers }, (_, i) => h.startWorker(env).then((p) => [`w${i}`, p] as const)),
    ]);
    started.filter(([id]) => id.startsWith('o')).forEach(([id, p]) => orchestrators.set(id, p));
    await h.readEvents();
    snapshots.push(await stableAssignment(h, groupId, s.orchestrators, 'start', s.partitions, settle));
    log(`started ${s.orchestrators} orchestrators and ${s.workers} workers`);

    const urls = async () => Promise.all([...orchestrators.values()].map((p) => p.ready));
    const half = (x: number) => Math.ceil(x / 2);
    const stepCompleted = () => h.events.items.filter((e) => e.event === 'StepCompleted').length;
    const t0 = Date.now();
    const ids = [
      ...(await startRuns(await urls(), THREE_STEP, half(s.runs), `${s.label}-a`)),
      ...(await startRuns(await urls(), ORDER_SAGA, half(s.sagas), `${s.label}-sa`)),
    ];
    await progressOrGoOn(
      'progress before the scale-out',
      stepCompleted,
      Math.max(1, Math.floor(ids.length / 4)),
    );

    const added = `o${s.orchestrators}`;
    orchestrators.set(added, await h.startOrchestrator({ ...env, ORCHESTRATOR_INSTANCE_ID: added }));
    snapshots.push(
      await stableAssignment(
        h,
        groupId,
        s.orchestrators + 1,
        'added',
        s.partitions,
        settle,
        snapshots.at(-1),
      ),
    );
    log(`added ${added}`);
    ids.push(
      ...(await startRuns(await urls(), THREE_STEP, s.runs - half(s.runs), `${s.label}-b`)),
      ...(await startRuns(await urls(), ORDER_SAGA, s.sagas - half(s.sagas), `${s.label}-sb`)),
    );
    const before = stepCompleted();
    await progressOrGoOn(
      'progress before the kill',
      stepCompleted,
      before + Math.max(1, Math.floor(ids.length / 8)),
    );
    const victimId = 'o0';
    const victim = orchestrators.get(victimId)!;
    const victimClient = Object.keys(snapshots.at(-1)!.members).find((c) => c.endsWith(`-${victimId}`));
    const victimPartitions = victimClient
      ? (snapshots.at(-1)!.members[victimClient][h.codec.physical(Topic.WF_REQUESTS)] ?? [])
      : [];
    victim.kill('SIGKILL');
    await victim.exited;
    orchestrators.delete(victimId);
    log(`SIGKILLed ${victimId}`);
    snapshots.push(
      await stableAssignment(h, groupId, s.orchestrators, 'killed', s.partitions, settle, snapshots.at(-1)),
    );

    const ended = () =>
      new Set(h.events.items.filter((e) => TERMINAL_EVENTS.has(e.event)).map((e) => e.value.runId));
    try {
      await eventually('every run ended', () => ended().size, {
        until: (c) => c >= ids.length,
        timeoutMs: s.timeoutMs,
        intervalMs: 100,
      });
    } catch (e) {
      if (!(e instanceof AwaitTimeoutError)) throw e;
    }
    const seconds = (Date.now() - t0) / 1000;

    const byRun = new Map<string, Array<{ event: string; stepId?: string }>>();
    for (const e of h.events.items)
      byRun.set(e.value.runId, [
        ...(byRun.get(e.value.runId) ?? []),
        { event: e.event, stepId: e.value.stepId },
      ]);
    const done = ended();
    const expected = new Map([
      [THREE_STEP, stepsOf(s.workflows, THREE_STEP)],
      [ORDER_SAGA, stepsOf(s.workflows, ORDER_SAGA)],
    ]);
    const duplicateStepCompleted: string[] = [];
    const wrongSteps: string[] = [];
    let completed = 0;
    const notCompleted: string[] = [];
    for (const id of ids) {
      const evs = byRun.get(id) ?? [];
      const steps = evs.filter((e) => e.event === 'StepCompleted').map((e) => e.stepId!);
      const counts = new Map<string, number>();
      steps.forEach((st) => counts.set(st, (counts.get(st) ?? 0) + 1));
      for (const [st, c] of counts) if (c > 1) duplicateStepCompleted.push(`${id}/${st} x${c}`);
      if (evs.some((e) => e.event === 'RunCompleted')) {
        completed++;
        const want = expected.get(workflowOf.get(id)!)!;
        if ([...counts.keys()].join(',') !== want.join(','))
          wrongSteps.push(`${id}: got ${[...counts.keys()].join(',')}`);
      } else if (done.has(id)) notCompleted.push(id);
    }
    const exits = h.processes
      .filter((p) => p !== victim && (p.proc.exitCode !== null || p.proc.signalCode !== null))
      .map(
        (p) =>
          `pid ${p.proc.pid}: exit ${p.proc.exitCode ?? p.proc.signalCode}\n${p.logs.slice(-10).join('\n')}`,
      );
    return {
      instances: s.orchestrators,
      workers: s.workers,
      runs: ids.length,
      completed,
      lost: ids.filter((id) => !done.has(id)),
      notCompleted,
      duplicateStepCompleted,
      wrongSteps,
      seconds,
      exits,
      snapshots,
      victimPartitions,
    };
  } finally {
    await h.teardown();
  }
}
