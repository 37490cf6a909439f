export interface TopicSpec {
  topic: string;
  partitions: number;
  /** Topic configs, e.g. `{ 'cleanup.policy': 'compact' }`, `{ 'retention.ms': '604800000' }`. */
  configs?: Record<string, string>;
  /** Wanted replication factor (the catalog's); capped by the live broker count. Omitted: the broker default. */
  replicationFactor?: number;
  /** Wanted `min.insync.replicas` (the catalog's); capped with the replication factor. Omitted: the broker default. */
  minInsyncReplicas?: number;
}

/** What a topic is created with on a cluster of a given size. */
export interface EffectiveReplication {
  replicationFactor: number;
  minInsyncReplicas: number;
}
