import { randomBytes } from 'node:crypto';
import { Kafka, logLevel, type Admin, type ITopicConfig } from '@keyflow/kafka';
import Redis from 'ioredis';
import { ensureTopics } from '@keyflow/kafka';
import { testInfra, type InfraEndpoints } from './infra';

/**
 * A per-test namespace: every topic, consumer group id, Redis key and registry subject a test makes
 * starts with its own prefix, so tests never see each other's data and can run against a shared broker.
 * `cleanup()` deletes the topics it created and the Redis keys under the prefix.
 */
export class TestNamespace {
  readonly prefix: string;
  readonly infra: InfraEndpoints;
  readonly kafka: Kafka;
  private admin?: Admin;
  private redisClient?: Redis;

  constructor(label: string, infra: InfraEndpoints = testInfra()) {
    const slug = label
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-|-$/g, '')
      .slice(0, 24);
    this.prefix = `t-${slug}-${randomBytes(4).toString('hex')}`;
    this.infra = infra;
    this.kafka = new Kafka({
      clientId: this.prefix,
      brokers: infra.kafkaBrokers,
      logLevel: logLevel.NOTHING,
      // A consumer that crashes once its test is over (a broker the test killed, the stack going down) must not
      // restart: kafkajs would retry for good and keep Jest from exiting.
      retry: { retries: 5, initialRetryTime: 100, restartOnFailure: async () => !this.closing },
    });
  }

  private closing = false;

  /** From now on, a crashed consumer of {@link kafka} is not restarted (call first when a test tears down). */
  stopRestarts(): void {
    this.closing = true;
  }

  /** `<prefix>.<name>`: a topic name private to this test. */
  topic(name: string): string {
    return `${this.prefix}.${name}`;
  }

  /** `<prefix>.<name>`: a consumer group id private to this test. */
  groupId(name: string): string {
    return `${this.prefix}.${name}`;
  }

  /** `<prefix>:<name>`: a Redis key prefix private to this test. */
  redisPrefix(name = ''): string {
    return `${this.prefix}:${name}`;
  }

  async getAdmin(): Promise<Admin> {
    if (!this.admin) {
      this.admin = this.kafka.admin();
      await this.admin.connect();
    }
    return this.admin;
  }

  /** Creates topics (names given without the prefix) unless they exist, riding out lagging metadata. Returns the full names. */
  async createTopics(
    ...topics: Array<string | (Omit<ITopicConfig, 'topic'> & { name: string })>
  ): Promise<string[]> {
    const admin = await this.getAdmin();
    const configs: ITopicConfig[] = topics.map((t) =>
      typeof t === 'string'
        ? { topic: this.topic(t), numPartitions: 3, replicationFactor: 1 }
        : { replicationFactor: 1, ...t, topic: this.topic(t.name) },
    );
    await ensureTopics(
      admin,
      configs.map((c) => ({
        topic: c.topic,
        partitions: c.numPartitions ?? 3,
        configs: Object.fromEntries((c.configEntries ?? []).map((e) => [e.name, e.value])),
      })),
    );
    return configs.map((c) => c.topic);
  }

  /** A Redis client for this test (lazily connected); its keys under {@link prefix} are deleted by cleanup. */
  redis(): Redis {
    this.redisClient ??= new Redis(this.infra.redisUrl, { maxRetriesPerRequest: 2, lazyConnect: false });
    return this.redisClient;
  }

  /** Deletes this test's topics and Redis keys, then disconnects. Safe to call twice. */
  async cleanup(): Promise<void> {
    this.stopRestarts();
    if (this.redisClient) {
      const keys: string[] = [];
      let cursor = '0';
      do {
        const [next, batch] = await this.redisClient.scan(cursor, 'MATCH', `${this.prefix}:*`, 'COUNT', 1000);
        cursor = next;
        keys.push(...batch);
      } while (cursor !== '0');
      if (keys.length) await this.redisClient.del(...keys);
      this.redisClient.disconnect();
      this.redisClient = undefined;
    }
    if (this.admin) {
      const existing = new Set(await this.admin.listTopics());
      const mine = [...existing].filter((t) => t.startsWith(`${this.prefix}.`));
      if (mine.length)
        await this.admin.deleteTopics({ topics: mine, timeout: 10_000 }).catch(() => undefined);
      await this.admin.disconnect();
      this.admin = undefined;
    }
  }
}
