import type { PayloadSerde } from '@keyflow/contracts';
import type { ConsumedMessage } from '@keyflow/kafka';
import type { TaskCommand, TaskTopic } from '@keyflow/schemas';
import { isRetryable } from '@keyflow/errors';
import { TaskInputError } from '@keyflow/handler';

/**
 * The worker's bytes-to-value steps, the only places a task command's payload is read, both through the contracts'
 * {@link PayloadSerde} (the one serde the engine, the read model and rebuild use too): the command from its record
 * ({@link decodeTask}), then, once its lease is held, its input ({@link taskInput}). Nothing else in the worker
 * decodes.
 */

/**
 * The task command of a consumed record. Synchronous (no promise, no turn of the event loop) when the writer's
 * schema is already known here, the common case; else a promise that fetches it from the schema registry first.
 * @param logicalTopic the record's logical topic (`task.<type>`)
 * @throws ContractError (also as the promise's rejection): not retryable when the bytes are no command of the topic
 *   (the caller dead-letters them), retryable when the registry does not answer
 */
export function decodeTask(
  serde: PayloadSerde,
  logicalTopic: TaskTopic,
  m: ConsumedMessage,
): TaskCommand | Promise<TaskCommand> {
  const loc = { topic: m.topic, partition: m.partition, offset: m.offset };
  const known = serde.decodeIfKnown(logicalTopic, m.value, loc);
  if (known) return known.value as TaskCommand;
  return serde.decode(logicalTopic, m.value, loc).then((d) => d.value as TaskCommand);
}

/**
 * A command's input as JSON: its inline `input` text parsed without a turn, or, behind a claim check (`inputRef`),
 * the blob it names read first (a promise then). A TaskInputError is returned, not thrown, when the text is not JSON
 * or the blob cannot be read for good.
 * @throws (rejects) the blob store's retryable error when it does not answer
 */
export function taskInput(serde: PayloadSerde, cmd: TaskCommand): unknown {
  const text = serde.text(cmd.input, cmd.inputRef);
  if (typeof text === 'string') return parsedInput(serde, cmd, text);
  return text.then(
    (t) => parsedInput(serde, cmd, t),
    (e: unknown) => {
      if (isRetryable(e, true)) throw e;
      return new TaskInputError(`input of ${cmd.idempotencyKey}: ${(e as Error).message}`, { cause: e });
    },
  );
}

/**
 * A command's input text as JSON, or a TaskInputError (returned) when it is not JSON. The message names the class
 * of the parser's error, never its message (it quotes the text around the fault, which may be personal data).
 */
function parsedInput(serde: PayloadSerde, cmd: TaskCommand, text: string): unknown {
  try {
    return serde.parse(text, `input of ${cmd.idempotencyKey}`);
  } catch (e) {
    return new TaskInputError((e as Error).message, { cause: e });
  }
}
