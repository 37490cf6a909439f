import { effectiveReplication, topicCreation } from '../../src/admin/topics';

const catalog = { replicationFactor: 3, minInsyncReplicas: 2 };

describe('effectiveReplication: the catalog replication capped by the live broker count', () => {
  it('a 3-broker cluster gets the catalog RF 3 / min ISR 2', () => {
    expect(effectiveReplication(catalog, 3)).toEqual({ replicationFactor: 3, minInsyncReplicas: 2 });
  });

  it('more brokers than the catalog asks for do not raise it', () => {
    expect(effectiveReplication(catalog, 7)).toEqual({ replicationFactor: 3, minInsyncReplicas: 2 });
  });

  it('one broker gets RF 1 / min ISR 1, so the default one-broker stack still creates its topics', () => {
    expect(effectiveReplication(catalog, 1)).toEqual({ replicationFactor: 1, minInsyncReplicas: 1 });
  });

  it('two brokers keep tolerating one lost replica: RF 2 / min ISR 1, not a min ISR that stops writes', () => {
    expect(effectiveReplication(catalog, 2)).toEqual({ replicationFactor: 2, minInsyncReplicas: 1 });
  });

  it('min ISR never exceeds the capped replication factor', () => {
    expect(effectiveReplication({ replicationFactor: 3, minInsyncReplicas: 3 }, 2)).toEqual({
      replicationFactor: 2,
      minInsyncReplicas: 2,
    });
  });

  it('rejects a broker count or a wanted value that is not a positive integer', () => {
    expect(() => effectiveReplication(catalog, 0)).toThrow(/liveBrokers must be a positive integer/);
    expect(() => effectiveReplication({ replicationFactor: 1.5, minInsyncReplicas: 1 }, 3)).toThrow(
      /replicationFactor/,
    );
  });
});

describe('topicCreation: the createTopics entry of a spec', () => {
  it('carries the capped replication factor and min.insync.replicas as a topic config', () => {
    expect(
      topicCreation({ topic: 't', partitions: 6, configs: { 'cleanup.policy': 'compact' }, ...catalog }, 1),
    ).toEqual({
      topic: 't',
      numPartitions: 6,
      replicationFactor: 1,
      configEntries: [
        { name: 'cleanup.policy', value: 'compact' },
        { name: 'min.insync.replicas', value: '1' },
      ],
    });
  });

  it('leaves replication to the broker defaults when the spec names none', () => {
    expect(topicCreation({ topic: 't', partitions: 2 }, 3)).toEqual({
      topic: 't',
      numPartitions: 2,
      configEntries: [],
    });
  });

  it('an explicit min.insync.replicas config wins over the spec value', () => {
    const c = topicCreation(
      { topic: 't', partitions: 1, configs: { 'min.insync.replicas': '3' }, ...catalog },
      3,
    );
    expect(c.configEntries).toEqual([{ name: 'min.insync.replicas', value: '3' }]);
  });
});
