import type { EventCodec } from '@keyflow/contracts';
import type { LogicalTopic } from '@keyflow/schemas';
import { rerunVerdict, type RerunFacts, type TaskCommandRef } from '@keyflow/workflow';
import type { RedriveAdmit } from './redrive';
import { taskTypeOfTopic } from './catalog';

/** Refusal code of a task command DLQ record that does not decode: its run cannot be checked. */
export const UNDECODABLE_COMMAND = 'UNDECODABLE_COMMAND';

/** A task command as the check needs it: the step attempt, and the key of its completion record. */
export type CheckedCommand = TaskCommandRef & { idempotencyKey: string };

/**
 * The redrive check of task commands ({@link RedriveAdmit}) every DLQ tool applies, built on the one rule of
 * `rerunVerdict` (libs/workflow, also what `keyflow replay` applies): a record of a task DLQ (`task.<type>.dlq`) is
 * decoded with its topic's schema, `facts` says what is known of its run (the engine's view, the worker's record, the
 * record's age in ms from its Kafka timestamp), and a command that could run a side effect nothing awaits is refused
 * with the verdict's code and reason (naming the run, its status and why). A record that does not decode is refused
 * (code {@link UNDECODABLE_COMMAND}): its run cannot be checked. Records of other DLQs (wf.requests, task.results)
 * are let through. The caller passes no check at all when the operator said to re-run (`--allow-rerun`, `allowRerun`).
 * @param codec reads the DLQ records' original topics (physical names of its prefix).
 */
export function rerunAdmission(
  codec: Pick<EventCodec, 'logical' | 'useTopics' | 'decode'>,
  facts: (cmd: CheckedCommand, ageMs: number) => Promise<RerunFacts>,
): RedriveAdmit {
  return async (message, at) => {
    const logical = codec.logical(at.originalTopic) as LogicalTopic | undefined; // a task topic, checked next
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
    const verdict = rerunVerdict(cmd, await facts(cmd, Math.max(0, Date.now() - Number(message.timestamp))));
    return verdict.safe ? undefined : { code: verdict.code, reason: verdict.reason };
  };
}
