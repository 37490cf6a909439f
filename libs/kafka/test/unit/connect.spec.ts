import pino from 'pino';
import { connectUntilAnswered, isRetriableKafkaError, untilAnswered } from '../../src';

const logger = pino({ level: 'silent' });

/** An error shaped as kafkajs throws them (name, retriable flag), without a broker. */
const kafkaError = (name: string, retriable: boolean) => Object.assign(new Error(name), { name, retriable });

/** A client whose connect fails with `failures` in order, then succeeds; counts calls. */
function client(failures: Error[]) {
  const calls = { connect: 0, disconnect: 0 };
  return {
    calls,
    connect: async () => {
      const e = failures[calls.connect++];
      if (e) throw e;
    },
    disconnect: async () => {
      calls.disconnect++;
    },
  };
}

describe('connecting a kafkajs client at startup', () => {
  it('a connect refused by a broker that just died is tried again, on fresh metadata, until it answers', async () => {
    const c = client([
      kafkaError('KafkaJSConnectionError', true),
      kafkaError('KafkaJSNumberOfRetriesExceeded', true),
    ]);
    await connectUntilAnswered(c, { what: 'test producer', logger, deadlineMs: 10_000, initialDelayMs: 1 });
    expect(c.calls).toEqual({ connect: 3, disconnect: 2 });
  });

  it('a non-retriable error (a fenced producer, bad credentials) is thrown at once', async () => {
    const fenced = kafkaError('KafkaJSProtocolError', false);
    const c = client([fenced]);
    await expect(
      connectUntilAnswered(c, { what: 'test producer', logger, deadlineMs: 10_000, initialDelayMs: 1 }),
    ).rejects.toBe(fenced);
    expect(c.calls.connect).toBe(1);
  });

  it('gives up with the last error once the deadline has passed', async () => {
    const refused = kafkaError('KafkaJSConnectionError', true);
    const c = client(Array.from({ length: 1_000 }, () => refused));
    await expect(
      connectUntilAnswered(c, { what: 'test producer', logger, deadlineMs: 50, initialDelayMs: 5 }),
    ).rejects.toBe(refused);
    expect(c.calls.connect).toBeGreaterThan(1);
    expect(c.calls.connect).toBeLessThan(1_000);
  });

  it('classifies kafkajs errors by their retriable flag, and retries exhausted as retriable', () => {
    expect(isRetriableKafkaError(kafkaError('KafkaJSConnectionError', true))).toBe(true);
    expect(isRetriableKafkaError(kafkaError('KafkaJSNumberOfRetriesExceeded', false))).toBe(true);
    expect(isRetriableKafkaError(kafkaError('KafkaJSNonRetriableError', false))).toBe(false);
    expect(isRetriableKafkaError(new Error('config'))).toBe(false);
  });
});

describe('asking Kafka something at startup (untilAnswered)', () => {
  it('a request answered NOT_LEADER_FOR_PARTITION (a topic just created) is asked again until it answers, and its answer returned', async () => {
    let calls = 0;
    const answer = await untilAnswered(
      async () => {
        if (calls++ < 2) throw kafkaError('KafkaJSProtocolError', true);
        return 42;
      },
      { what: 'end offsets', logger, deadlineMs: 10_000, initialDelayMs: 1 },
    );
    expect([answer, calls]).toEqual([42, 3]);
  });

  it('a non-retriable error is thrown at once, and a retriable one once the deadline has passed', async () => {
    let calls = 0;
    const refused = kafkaError('KafkaJSProtocolError', false);
    await expect(
      untilAnswered(
        async () => {
          calls++;
          throw refused;
        },
        { what: 'x', logger, initialDelayMs: 1 },
      ),
    ).rejects.toBe(refused);
    expect(calls).toBe(1);
    const away = kafkaError('KafkaJSConnectionError', true);
    await expect(
      untilAnswered(
        async () => {
          throw away;
        },
        { what: 'x', logger, deadlineMs: 50, initialDelayMs: 10 },
      ),
    ).rejects.toBe(away);
  });
});
