import { FIXED_TOPICS, type FixedTopic } from './generated/events';

/**
 * Logical topic names (schemas/catalog.yaml; docs/contracts/topics.md). The fixed ones are generated from the catalog
 * ({@link FixedTopic}, `Topic.WF_REQUESTS`, ...); a task type's command topic is made only by {@link taskTopic}; a
 * DLQ is `<topic>.dlq`. Physical names add the environment's prefix (`EventCodec.physical`).
 */

declare const taskTopicBrand: unique symbol;

/** The command topic of one task type, `task.<type>`: made by {@link taskTopic} only, so no call site concatenates. */
export type TaskTopic = `task.${string}` & { readonly [taskTopicBrand]: true };

/** A topic the codec encodes and decodes: a fixed topic of the catalog or a task type's command topic. */
export type LogicalTopic = FixedTopic | TaskTopic;

declare const triggerTopicBrand: unique symbol;

/**
 * A topic trigger's own topic, `trigger.<name>`: where a redrive of the trigger's DLQ sends records, which the trigger
 * reads beside its source topic (a redrive never writes to a team's source topic). Made by {@link triggerTopic} only.
 * It carries the source's records as they were (not keyflow's Avro events), so the codec does not encode it.
 */
export type TriggerTopic = `trigger.${string}` & { readonly [triggerTopicBrand]: true };

/** The topic of the trigger named `name`: `trigger.<name>`. */
export const triggerTopic = (name: string): TriggerTopic => `trigger.${name}` as TriggerTopic;

/** The DLQ of a logical topic, `<topic>.dlq` (it takes its topic's catalog settings); a trigger's is `trigger.<name>.dlq`. */
export type DlqTopic = `${FixedTopic}.dlq` | `task.${string}.dlq` | `trigger.${string}.dlq`;

const FIXED: ReadonlySet<string> = new Set(FIXED_TOPICS);

/**
 * The logical command topic of a task type: `task.<type>`.
 * @param task a task contract (anything with its `type`, e.g. `defineTask(...)`) or a task type name.
 */
export function taskTopic(task: { readonly type: string } | string): TaskTopic {
  return `task.${typeof task === 'string' ? task : task.type}` as TaskTopic;
}

/** Whether `name` is a fixed logical topic of the catalog (`wf.requests`, `task.results`, ...). */
export const isFixedTopic = (name: string): name is FixedTopic => FIXED.has(name);

/**
 * A logical topic name read from outside the code (a CLI argument, a physical name without its prefix) as a
 * {@link LogicalTopic}: a fixed topic of the catalog, else a `task.<type>` name (not a DLQ); undefined otherwise.
 */
export function asLogicalTopic(name: string): LogicalTopic | undefined {
  if (isFixedTopic(name)) return name;
  if (name.startsWith('task.') && name.length > 'task.'.length && !name.endsWith('.dlq'))
    return taskTopic(name.slice('task.'.length));
  return undefined;
}

/** The DLQ of a logical topic: `<topic>.dlq`. */
export const dlqOf = (topic: LogicalTopic | TriggerTopic): DlqTopic => `${topic}.dlq` as DlqTopic;
