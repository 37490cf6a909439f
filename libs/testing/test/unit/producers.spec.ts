import { createTopicArgs, jsonLine, resetToEarliestArgs } from '../../producers';

describe('the Java tools the producers helper runs', () => {
  const base = { classpath: '/k/libs/*', brokers: ['b1:9092', 'b2:9092'] };

  it('creates a topic with TopicCommand, once (--if-not-exists), with the partitions, replication and configs asked', () => {
    expect(
      createTopicArgs({ ...base, topic: 'orders', partitions: 6, config: { 'retention.ms': '-1' } }),
    ).toEqual([
      '-cp',
      '/k/libs/*',
      'org.apache.kafka.tools.TopicCommand',
      '--bootstrap-server',
      'b1:9092,b2:9092',
      '--create',
      '--if-not-exists',
      '--topic',
      'orders',
      '--partitions',
      '6',
      '--replication-factor',
      '1',
      '--config',
      'retention.ms=-1',
    ]);
    expect(() => createTopicArgs({ ...base, topic: 'orders', partitions: 0 })).toThrow(/partitions/);
  });

  it('resets one group on one topic to the earliest and executes it (not the dry run the tool defaults to)', () => {
    const args = resetToEarliestArgs({ ...base, group: 'g', topic: 'orders' });
    expect(args.slice(2)).toEqual([
      'org.apache.kafka.tools.consumer.group.ConsumerGroupCommand',
      '--bootstrap-server',
      'b1:9092,b2:9092',
      '--group',
      'g',
      '--topic',
      'orders',
      '--reset-offsets',
      '--to-earliest',
      '--execute',
    ]);
  });

  it('writes a value as one JSON line, a string as it is (a record that is not JSON), and refuses a key with a tab', () => {
    expect(jsonLine({ key: 'k', value: { a: 'x\ty\nz' } })).toEqual({ key: 'k', value: '{"a":"x\\ty\\nz"}' });
    expect(jsonLine({ key: 'k', value: 'not json' })).toEqual({ key: 'k', value: 'not json' });
    expect(() => jsonLine({ key: 'a\tb', value: 1 })).toThrow(/tab or newline/);
    expect(() => jsonLine({ key: 'k', value: undefined })).toThrow(/no JSON form/);
  });
});
