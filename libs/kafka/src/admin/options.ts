/** Default consumer group ids of the services without a topic prefix (see {@link defaultGroupId}). */
export const DEFAULT_GROUP_IDS = {
  orchestrator: 'keyflow.orchestrator',
  workers: 'keyflow.workers',
} as const;

/**
 * A service's consumer group id when ORCHESTRATOR_GROUP_ID / WORKER_GROUP_ID is unset: `<KEYFLOW_TOPIC_PREFIX>` +
 * {@link DEFAULT_GROUP_IDS}, so deployments that share a cluster under different prefixes never share a group (nor
 * the orchestrator's transactional ids, `<group>-p<n>`, which would fence each other). No prefix: `keyflow.workers`,
 * `keyflow.orchestrator`, as before.
 */
export const defaultGroupId = (service: keyof typeof DEFAULT_GROUP_IDS, topicPrefix: string): string =>
  `${topicPrefix}${DEFAULT_GROUP_IDS[service]}`;

/** What {@link assertGroupIdMigrated} checks: one service's group id setting. */
export interface GroupIdMigrationOptions {
  service: keyof typeof DEFAULT_GROUP_IDS;
  topicPrefix: string;
  groupId: string;
  /** The variable that sets the group id (WORKER_GROUP_ID, ORCHESTRATOR_GROUP_ID), for the message. */
  setting: string;
  topics: string[];
}

/** How long topic creation, metadata and subscriptions are retried while the broker's metadata lags, in ms. */
export const TOPICS_SETTLE_TIMEOUT_MS = 30_000;
