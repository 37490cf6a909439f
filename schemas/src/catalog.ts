import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { z } from 'zod';
import { COMPATIBILITY_MODES, type CompatibilityMode } from './compat';
import { SCHEMAS_DIR } from './schema-set';

const Mode = z.enum(COMPATIBILITY_MODES as [CompatibilityMode, ...CompatibilityMode[]]);

const TopicEntry = z.object({
  topic: z.string().min(1),
  key: z.string().min(1),
  partitions: z.string().min(1),
  retention: z.string().min(1),
  producers: z.array(z.string()).min(1),
  consumers: z.array(z.string()).min(1),
  on_failure: z.string().min(1),
  events: z.array(z.string()).min(1),
  compatibility: Mode.optional(),
  replication_factor: z.number().int().min(1).optional(),
  min_insync_replicas: z.number().int().min(1).optional(),
});

const CatalogFile = z.object({
  defaults: z.object({
    compatibility: Mode,
    replication_factor: z.number().int().min(1),
    min_insync_replicas: z.number().int().min(1),
  }),
  topics: z.array(TopicEntry).min(1),
  shared_types: z.array(z.string()).default([]),
});

/**
 * A catalog entry with the defaults applied. `replicationFactor` and `minInsyncReplicas` are what the topic is
 * created with on a cluster large enough (`ensureTopics` caps both by the live broker count).
 */
export type TopicEntry = z.infer<typeof TopicEntry> & {
  compatibility: CompatibilityMode;
  replicationFactor: number;
  minInsyncReplicas: number;
};
export interface Catalog {
  topics: TopicEntry[];
  sharedTypes: string[];
  defaultCompatibility: CompatibilityMode;
}

/**
 * Reads and validates `schemas/catalog.yaml`.
 * @throws Error listing every invalid entry (path and message) when the file does not match its shape.
 */
export function loadCatalog(file = join(SCHEMAS_DIR, 'catalog.yaml')): Catalog {
  const parsed = CatalogFile.safeParse(parse(readFileSync(file, 'utf8')));
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`).join('\n');
    throw new Error(`${file} is invalid:\n${lines}`);
  }
  const { defaults, topics, shared_types } = parsed.data;
  const bad = topics
    .map((t) => ({
      topic: t.topic,
      rf: t.replication_factor ?? defaults.replication_factor,
      isr: t.min_insync_replicas ?? defaults.min_insync_replicas,
    }))
    .filter((t) => t.isr > t.rf);
  if (bad.length)
    throw new Error(
      `${file} is invalid:\n${bad.map((t) => `  ${t.topic}: min_insync_replicas ${t.isr} > replication_factor ${t.rf}`).join('\n')}`,
    );
  return {
    topics: topics.map((t) => ({
      ...t,
      compatibility: t.compatibility ?? defaults.compatibility,
      replicationFactor: t.replication_factor ?? defaults.replication_factor,
      minInsyncReplicas: t.min_insync_replicas ?? defaults.min_insync_replicas,
    })),
    sharedTypes: shared_types,
    defaultCompatibility: defaults.compatibility,
  };
}

/** The catalog entry of a logical topic; `task.<type>` entries match any `task.X` that is not another entry. */
export function topicEntry(catalog: Catalog, logicalTopic: string): TopicEntry {
  const exact = catalog.topics.find((t) => t.topic === logicalTopic);
  if (exact) return exact;
  const template = catalog.topics.find(
    (t) =>
      t.topic.includes('<') &&
      new RegExp(`^${t.topic.replace(/\./g, '\\.').replace(/<[^>]+>/g, '.+')}$`).test(logicalTopic),
  );
  if (!template) throw new Error(`topic ${logicalTopic} has no entry in schemas/catalog.yaml`);
  return template;
}
