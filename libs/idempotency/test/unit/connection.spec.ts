import { join } from 'node:path';
import { PEM_TEXT, settingsIssues, tempFiles } from '@keyflow/testing/settings';
import { describeRedis, RedisConnectionConfigError, redisConnectionFromEnv } from '../../src/connection';

const { file, dir } = tempFiles('redis-connection-');
const ca = file('ca.pem', PEM_TEXT);

/** The issues of the settings error it throws. */
const issues = (url: string, env: NodeJS.ProcessEnv): string[] =>
  settingsIssues(() => redisConnectionFromEnv(url, env), RedisConnectionConfigError);

describe('Redis connection settings', () => {
  it('a plain URL gives no extra options', () => {
    expect(redisConnectionFromEnv('redis://127.0.0.1:6390', {})).toEqual({
      url: 'redis://127.0.0.1:6390',
      options: {},
    });
  });

  it('rediss:// with a password file and a CA gives ioredis the password and the CA, and the log line neither', () => {
    const conn = redisConnectionFromEnv('rediss://cache.example:6380', {
      REDIS_PASSWORD_FILE: file('pw', 's3cret\n'),
      REDIS_TLS_CA_FILE: ca,
    });
    expect(conn.options).toEqual({ password: 's3cret', tls: { ca: [PEM_TEXT] } });
    expect(describeRedis(conn)).toBe('rediss://cache.example:6380 as default');
    expect(describeRedis(conn)).not.toContain('s3cret');
    expect(describeRedis(redisConnectionFromEnv('redis://app:pw@h:1', {}))).toBe('redis://h:1 as app');
  });

  it('an ACL user in the URL with the password in a file: both reach ioredis as options, the URL keeps no userinfo', () => {
    const conn = redisConnectionFromEnv('redis://app@cache:6379/2', {
      REDIS_PASSWORD_FILE: file('pw3', 'pw\n'),
    });
    expect(conn).toEqual({ url: 'redis://cache:6379/2', options: { username: 'app', password: 'pw' } });
    expect(describeRedis(conn)).toBe('redis://cache:6379 as app');
  });

  it('TLS files with redis://, a password twice, a lone client certificate and bad files are refused, each named', () => {
    expect(issues('redis://h:1', { REDIS_TLS_CA_FILE: ca })).toEqual([
      expect.stringMatching(/^REDIS_TLS_CA_FILE: set, but REDIS_URL is redis:\/\//),
    ]);
    expect(issues('redis://:pw@h:1', { REDIS_PASSWORD_FILE: file('pw2', 'x') })).toEqual([
      expect.stringMatching(/REDIS_URL carries a password too/),
    ]);
    expect(issues('rediss://h:1', { REDIS_TLS_KEY_FILE: ca })).toEqual([
      expect.stringMatching(/REDIS_TLS_CERT_FILE, REDIS_TLS_KEY_FILE: give both/),
    ]);
    expect(issues('rediss://h:1', { REDIS_TLS_CA_FILE: file('junk', 'junk') })).toEqual([
      expect.stringMatching(/^REDIS_TLS_CA_FILE: .* holds no PEM block/),
    ]);
    expect(issues('redis://h:1', { REDIS_PASSWORD_FILE: join(dir, 'missing') })).toEqual([
      expect.stringMatching(/^REDIS_PASSWORD_FILE: cannot read/),
    ]);
    expect(issues('redis://h:1', { REDIS_PASSWORD_FILE: file('empty', '\n') })).toEqual([
      expect.stringMatching(/^REDIS_PASSWORD_FILE: .* is empty/),
    ]);
    expect(issues('http://h:1', {})).toEqual([expect.stringMatching(/^REDIS_URL: http:\/\/ is not redis/)]);
  });
});
