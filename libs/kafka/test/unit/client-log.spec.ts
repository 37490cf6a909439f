import { createKafka } from '../../src';
import type { Logger } from '@keyflow/observability';

/** A logger that keeps what it is given: [level, message, fields]. */
function capturing() {
  const lines: Array<[string, string, Record<string, unknown>]> = [];
  const at =
    (level: string) =>
    (fields: Record<string, unknown>, message: string): void =>
      void lines.push([level, message, fields]);
  const logger = { error: at('error'), warn: at('warn'), info: at('info'), debug: at('debug') };
  return { lines, logger: logger as unknown as Logger };
}

const TOO_LARGE = 'The request included a message larger than the max message size the server will accept';

describe("kafkajs's own log lines through createKafka", () => {
  it('a too-large refusal, which the caller handles, goes out as a warning; other errors stay errors', () => {
    const { lines, logger } = capturing();
    const root = createKafka({ brokers: ['127.0.0.1:1'], clientId: 'log-test', logger }).logger();
    root.namespace('Producer').error(TOO_LARGE, { retryCount: 0 });
    root.namespace('Connection').error('Response Produce(key: 0, version: 7)', { error: TOO_LARGE });
    root.namespace('Producer').error('The producer attempted to use a sequence number out of order', {});
    root.namespace('Consumer').warn('something to warn about', {});
    expect(lines.map(([level, message]) => [level, message])).toEqual([
      ['warn', TOO_LARGE],
      ['warn', 'Response Produce(key: 0, version: 7)'],
      ['error', 'The producer attempted to use a sequence number out of order'],
      ['warn', 'something to warn about'],
    ]);
    expect(lines[0][2]).toMatchObject({ kafkajs: 'Producer', retryCount: 0 });
  });
});
