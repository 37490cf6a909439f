import { TASK_TYPE } from '@keyflow/workflow';
import { taskTopic, Topic } from '@keyflow/schemas';

/** The task type whose commands a logical topic carries, or undefined (task.results, DLQs, other topics). */
export function taskTypeOfTopic(logicalTopic: string): string | undefined {
  if (
    !logicalTopic.startsWith('task.') ||
    logicalTopic.endsWith('.dlq') ||
    logicalTopic === Topic.TASK_RESULTS
  )
    return undefined;
  return logicalTopic.slice('task.'.length);
}

/** The suffix of a DLQ topic's name: `<topic>.dlq` (see dlqTopicFor). */
const DLQ_SUFFIX = '.dlq';
/** The topics keyflow dead-letters into `<topic>.dlq` besides the task topics (schemas/catalog.yaml). */
const DLQ_SOURCES: ReadonlySet<string> = new Set([Topic.WF_REQUESTS, Topic.TASK_RESULTS]);

/** A topic trigger's own topic, `trigger.<name>` (libs/workflow TRIGGER_NAME): its DLQ is `trigger.<name>.dlq`. */
const TRIGGER_SOURCE = /^trigger\.[a-z0-9][a-z0-9-]{0,99}$/;

/**
 * Whether a logical topic name is a DLQ keyflow declares (schemas/catalog.yaml; Engine.topics and the workers'
 * topics): `wf.requests.dlq`, `task.results.dlq`, `task.<type>.dlq` for a legal task type, or a topic trigger's `trigger.<name>.dlq` (libs/workflow
 * TASK_TYPE, not itself ending in `.dlq`). With `declared` (logical DLQ names: a deployment's exact catalog, such as
 * the orchestrator's Engine.topics), only those. DLQ tools (CLI, ops API and console, lag monitor) act on no other
 * topic: another application's `*.dlq` in a shared cluster is not theirs to list, redrive or discard.
 */
export function isCatalogDlq(logical: string, declared?: ReadonlySet<string>): boolean {
  if (!logical.endsWith(DLQ_SUFFIX)) return false;
  const source = logical.slice(0, -DLQ_SUFFIX.length);
  const type = taskTypeOfTopic(source);
  const known =
    DLQ_SOURCES.has(source) ||
    TRIGGER_SOURCE.test(source) ||
    (type !== undefined && source === taskTopic(type) && TASK_TYPE.test(type) && !type.endsWith(DLQ_SUFFIX));
  return known && (declared === undefined || declared.has(logical));
}

/**
 * The one topic a DLQ's records may be redriven to: its source, `<topic>` of `<topic>.dlq` (physical names). For a
 * topic trigger's DLQ that is the trigger's own topic `trigger.<name>`, never the team's source topic.
 */
export const catalogDlqSource = (physicalDlq: string): string =>
  physicalDlq.endsWith(DLQ_SUFFIX) ? physicalDlq.slice(0, -DLQ_SUFFIX.length) : physicalDlq;
