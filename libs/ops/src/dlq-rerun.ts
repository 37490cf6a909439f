import type { EventCodec } from '@keyflow/contracts';
import { isRetryable } from '@keyflow/errors';
import { Topic, type LogicalTopic, type StartRun } from '@keyflow/schemas';
import { rerunVerdict, type RerunFacts, type TaskCommandRef } from '@keyflow/workflow';
import type { RedriveAdmit } from './redrive';
import { taskTypeOfTopic } from './catalog';

/** Refusal code of a task command DLQ record that does not decode: its run cannot be checked. */
export const UNDECODABLE_COMMAND = 'UNDECODABLE_COMMAND';

/** A task command as the check needs it: the step attempt, and the key of its completion record. */
export type CheckedCommand = TaskCommandRef & { idempotencyKey: string };

/**
 * What the caller knows of a command's run (`ageMs`: how old its DLQ record is, ms). `need.workerRecord` false: the
 * workers' completion record is not asked for (a child's start, which no worker record answers), so a caller need
 * not reach Redis for it.
 */
export type RerunFactsOf = (
  cmd: CheckedCommand,
  ageMs: number,
  need?: { workerRecord: boolean },
) => Promise<RerunFacts>;

/**
 * The redrive check of task commands ({@link RedriveAdmit}) every DLQ tool applies, built on the one rule of
 * `rerunVerdict` (libs/workflow, also what `keyflow replay` applies): a record of a task DLQ (`task.<type>.dlq`) is
 * decoded with its topic's schema, `facts` says what is known of its run (the engine's view, the worker's record, the
 * record's age in ms from its Kafka timestamp), and a command that could run a side effect nothing awaits is refused
 * with the verdict's code and reason (naming the run, its status and why). A record that does not decode is refused
 * (code {@link UNDECODABLE_COMMAND}): its run cannot be checked. A child run's StartRun in wf.requests.dlq is checked
 * as its parent step's attempt ({@link childStartAdmission}); other records of wf.requests and task.results are let
 * through. The caller passes no check at all when the operator said to re-run (`--allow-rerun`, `allowRerun`).
 * @param codec reads the DLQ records' original topics (physical names of its prefix).
 */
export function rerunAdmission(
  codec: Pick<EventCodec, 'logical' | 'useTopics' | 'decode'>,
  facts: RerunFactsOf,
): RedriveAdmit {
  return async (message, at) => {
    const logical = codec.logical(at.originalTopic) as LogicalTopic | undefined; // a task topic, checked next
    const ageMs = Math.max(0, Date.now() - Number(message.timestamp));
    if (logical === Topic.WF_REQUESTS) return childStartAdmission(codec, facts, message, at, ageMs);
    if (!logical || taskTypeOfTopic(logical) === undefined) return undefined;
    let cmd: CheckedCommand;
    try {
      await codec.useTopics([logical]);
      const d = await codec.decode(logical, message.value, {
        topic: at.originalTopic,
        partition: at.partition,
        offset: message.offset,
      });
      cmd = d.value as unknown as CheckedCommand;
    } catch (err) {
      return {
        code: UNDECODABLE_COMMAND,
        reason: `the command does not decode with ${logical}'s schema (${(err as Error).message}): its run cannot be checked`,
      };
    }
    const verdict = rerunVerdict(cmd, await facts(cmd, ageMs));
    return verdict.safe ? undefined : { code: verdict.code, reason: verdict.reason };
  };
}

/**
 * A child run's StartRun (a wf.requests record with `parent`) is checked as its parent step's attempt would be: the
 * child's end is that step's result, so starting it is safe only while the parent run awaits that attempt (the
 * engine dead-letters a child's StartRun it refuses and fails the parent step in the same transaction, so a redrive,
 * after a child version that takes the input is deployed, would start a child nothing awaits). Other wf.requests
 * records (a run's start, a signal, a cancel, a retry), and records that do not decode, are let through as before:
 * the engine dedupes them by run id, signal id or idempotency key.
 * @throws what decoding throws when it is retryable (the schema registry away): the record cannot be checked now
 */
async function childStartAdmission(
  codec: Pick<EventCodec, 'useTopics' | 'decode'>,
  facts: RerunFactsOf,
  message: Parameters<RedriveAdmit>[0],
  at: Parameters<RedriveAdmit>[1],
  ageMs: number,
): ReturnType<RedriveAdmit> {
  let parent: CheckedCommand | null | undefined;
  let child = '';
  try {
    await codec.useTopics([Topic.WF_REQUESTS]);
    const d = await codec.decode(Topic.WF_REQUESTS, message.value, {
      topic: at.originalTopic,
      partition: at.partition,
      offset: message.offset,
    });
    if (d.event !== 'StartRun') return undefined;
    parent = (d.value as StartRun).parent;
    child = (d.value as StartRun).runId;
  } catch (err) {
    // The registry away (retryable): thrown, the redrive stops and says so, rather than send a start unchecked.
    if (isRetryable(err, false)) throw err;
    return undefined; // not decodable: the engine refuses it again, it starts nothing
  }
  if (!parent) return undefined;
  // Only the parent run's view counts: no worker record answers for a child's start (a stored record of the parent
  // step's key is no reason to start the child), and the workers' completion TTL says nothing of it.
  const known = await facts(parent, ageMs, { workerRecord: false });
  const verdict = rerunVerdict(parent, { run: known.run });
  if (verdict.safe) return undefined;
  return {
    code: verdict.code,
    reason:
      known.run === undefined
        ? `child run ${child}'s StartRun cannot be checked: the status of its parent run ${parent.runId} is not known (give the orchestrator's API: --api or KEYFLOW_API_URL)`
        : `child run ${child}'s StartRun is not awaited by its parent: ${verdict.reason}`,
  };
}
