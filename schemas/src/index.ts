import { loadCatalog, topicEntry, type Catalog, type TopicEntry } from './catalog';
import {
  composeSchema,
  loadEventVersions,
  sharedTypes,
  type AvroSchema,
  type EventVersion,
} from './schema-set';

export * from './generated/events';
export {
  taskTopic,
  isFixedTopic,
  asLogicalTopic,
  dlqOf,
  triggerTopic,
  type TriggerTopic,
  type TaskTopic,
  type LogicalTopic,
  type DlqTopic,
} from './topics';
export { readProblems, checkLatest, checkHistory, COMPATIBILITY_MODES } from './compat';
export type { CompatibilityMode, ReadProblem, CompatibilityViolation } from './compat';
export { loadCatalog, topicEntry } from './catalog';
export type { Catalog, TopicEntry } from './catalog';
export { composeSchema, loadEventVersions, EVENT_NAMESPACE } from './schema-set';
export type { AvroSchema, EventVersion } from './schema-set';

/** Everything the codec and the tooling need: the catalog and every version of every event schema. */
export interface SchemaSet {
  catalog: Catalog;
  versions: Map<string, EventVersion[]>;
  /** Self-contained schema of one event version (shared types inlined); latest when `version` is omitted. */
  eventSchema(event: string, version?: number): AvroSchema;
  /**
   * The schema registered for a logical topic under TopicNameStrategy: the record of its only event, or the union
   * of its events' latest versions in catalog order. `versions` pins events to older versions (an older
   * service's view of the topic).
   */
  topicSchema(logicalTopic: string, versions?: Partial<Record<string, number>>): AvroSchema;
  topic(logicalTopic: string): TopicEntry;
}

let cached: SchemaSet | undefined;

/** Loads `schemas/` once per process. @throws Error when the catalog is invalid or names an event without a schema. */
export function schemaSet(): SchemaSet {
  if (cached) return cached;
  cached = build();
  return cached;
}

function build(): SchemaSet {
  const catalog = loadCatalog();
  const versions = loadEventVersions();
  const shared = sharedTypes(versions, catalog.sharedTypes);
  const latest = (event: string, version?: number) => {
    const vs = versions.get(event);
    if (!vs) throw new Error(`event ${event} has no schema in schemas/avro/${event}/`);
    const v = version === undefined ? vs.at(-1) : vs.find((x) => x.version === version);
    if (!v) throw new Error(`event ${event} has no version ${version}`);
    return v.schema;
  };
  const topicSchemas = new Map<string, AvroSchema>();
  return {
    catalog,
    versions,
    eventSchema: (event, version) => composeSchema([latest(event, version)], shared),
    topicSchema: (logicalTopic: string, pinned?: Partial<Record<string, number>>) => {
      const entry = topicEntry(catalog, logicalTopic);
      if (pinned)
        return composeSchema(
          entry.events.map((e) => latest(e, pinned[e])),
          shared,
        );
      let s = topicSchemas.get(entry.topic);
      if (!s) {
        s = composeSchema(
          entry.events.map((e) => latest(e)),
          shared,
        );
        topicSchemas.set(entry.topic, s);
      }
      return s;
    },
    topic: (logicalTopic) => topicEntry(catalog, logicalTopic),
  };
}
