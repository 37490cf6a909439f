import type { ClaimCheck } from '@keyflow/blobs';
import type { EventCodec } from '@keyflow/contracts';
import type { ConsumedMessage } from '@keyflow/kafka';
import type { TaskCommand } from '@keyflow/schemas';
import { isRetryable } from '@keyflow/errors';
import { TaskInputError } from './errors';

/**
 * The worker's bytes-to-value steps, the only places a task command's payload is read: the command from its record
 * ({@link decodeTask}), then, once its lease is held, its input ({@link taskInput}). Both are meant to become calls
 * of the contracts' payload serde; nothing else in the worker decodes.
 */

/**
 * The task command of a consumed record. Synchronous (no promise, no turn of the event loop) when the writer's
 * schema is already known here, the common case; else a promise that fetches it from the schema registry first.
 * @param logicalTopic the record's logical topic (`task.<type>`)
 * @throws ContractError (also as the promise's rejection): not retryable when the bytes are no command of the topic
 *   (the caller dead-letters them), retryable when the registry does not answer
 */
export function decodeTask(
  codec: EventCodec,
  logicalTopic: string,
  m: ConsumedMessage,
): TaskCommand | Promise<TaskCommand> {
  const loc = { topic: m.topic, partition: m.partition, offset: m.offset };
  const known = codec.decodeIfKnown(logicalTopic, m.value, loc);
  if (known) return known.value as TaskCommand;
  return codec.decode(logicalTopic, m.value, loc).then((d) => d.value as TaskCommand);
}

/**
 * A command's input as JSON: its inline `input` text parsed without a turn, or, behind a claim check (`inputRef`),
 * the blob it names read first (a promise then). A TaskInputError is returned, not thrown, when the text is not JSON
 * or the blob cannot be read for good.
 * @throws (rejects) the blob store's retryable error when it does not answer
 */
export function taskInput(claimCheck: ClaimCheck, cmd: TaskCommand): unknown {
  return cmd.inputRef ? inputFromBlob(claimCheck, cmd, cmd.inputRef) : parsedInput(cmd, cmd.input);
}

/** The input behind a claim check (see {@link taskInput}). */
async function inputFromBlob(claimCheck: ClaimCheck, cmd: TaskCommand, ref: string): Promise<unknown> {
  try {
    return parsedInput(cmd, await claimCheck.resolve(cmd.input, ref));
  } catch (e) {
    if (!isRetryable(e, true))
      return new TaskInputError(`input of ${cmd.idempotencyKey}: ${(e as Error).message}`, { cause: e });
    throw e;
  }
}

/** A command's input text as JSON, or a TaskInputError (returned) when it is not JSON. */
function parsedInput(cmd: TaskCommand, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    // Not the parser's message: it quotes the text around the fault, which may be personal data.
    return new TaskInputError(`input of ${cmd.idempotencyKey} is not JSON (${(e as Error).name})`);
  }
}
