import Redis, { type RedisOptions } from 'ioredis';
import { settingFileReader, SettingsError } from '@keyflow/errors';

/**
 * How a keyflow process connects to Redis, from the environment:
 *
 * | variable | meaning |
 * |---|---|
 * | `REDIS_URL` | `redis://[user[:password]@]host:port[/db]`, or `rediss://...` for TLS (ioredis URL forms) |
 * | `REDIS_PASSWORD_FILE` | a file holding the password (AUTH; Redis docs "ACL"), instead of one in the URL |
 * | `REDIS_TLS_CA_FILE` | PEM file of the CA(s) the server's certificate chains to (default: Node's CAs); rediss:// only |
 * | `REDIS_TLS_CERT_FILE` + `REDIS_TLS_KEY_FILE` | PEM client certificate and key, for a server with `tls-auth-clients yes` |
 *
 * Checked up front: a URL that is not redis:// or rediss://, a password both in the URL and in a file, TLS files
 * with a plain redis:// URL (they would silently not be used), a certificate without its key, an unreadable, empty or
 * non-PEM file. TLS certificates are always verified (CA and host name).
 */
export interface RedisConnection {
  url: string;
  /** ioredis options to lay under the caller's own (password, username, tls). */
  options: RedisOptions;
}

/** A Redis connection setting that cannot work; `issues` names each variable. Not retryable: fix the settings. */
export class RedisConnectionConfigError extends SettingsError {
  readonly code = 'REDIS_CONNECTION_CONFIG';
  constructor(issues: string[]) {
    super('Redis connection settings', issues);
  }
}

/**
 * The connection of `url` with the file settings of `env` (see {@link RedisConnection}).
 * @throws RedisConnectionConfigError naming every setting that cannot work
 */
export function redisConnectionFromEnv(given: string, env: NodeJS.ProcessEnv = process.env): RedisConnection {
  let url = given;
  const issues: string[] = [];
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
    if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:')
      issues.push(`REDIS_URL: ${parsed.protocol}// is not redis:// or rediss://`);
  } catch {
    issues.push('REDIS_URL: not a URL (redis://host:port or rediss://host:port)');
  }
  const tls = parsed?.protocol === 'rediss:';
  const read = settingFileReader(env, issues);

  const password = read('REDIS_PASSWORD_FILE', 'secret');
  if (password !== undefined && parsed?.password)
    issues.push('REDIS_PASSWORD_FILE: the REDIS_URL carries a password too; give one of them');
  const tlsFiles = ['REDIS_TLS_CA_FILE', 'REDIS_TLS_CERT_FILE', 'REDIS_TLS_KEY_FILE'].filter((k) =>
    env[k]?.trim(),
  );
  if (tlsFiles.length > 0 && parsed && !tls)
    issues.push(`${tlsFiles.join(', ')}: set, but REDIS_URL is redis:// (rediss:// uses TLS)`);
  if (Boolean(env.REDIS_TLS_CERT_FILE?.trim()) !== Boolean(env.REDIS_TLS_KEY_FILE?.trim()))
    issues.push(
      'REDIS_TLS_CERT_FILE, REDIS_TLS_KEY_FILE: give both (a client certificate and its key) or neither',
    );
  const ca = read('REDIS_TLS_CA_FILE', 'pem');
  const cert = read('REDIS_TLS_CERT_FILE', 'pem');
  const key = read('REDIS_TLS_KEY_FILE', 'pem');
  if (issues.length > 0) throw new RedisConnectionConfigError(issues);
  const options: RedisOptions = {};
  if (password !== undefined && parsed) {
    // ioredis takes a URL's userinfo over the options (an ACL user without a password in the URL becomes an empty
    // password): the user moves to the options and the URL keeps no userinfo.
    if (parsed.username) options.username = decodeURIComponent(parsed.username);
    options.password = password;
    parsed.username = '';
    parsed.password = '';
    url = parsed.toString();
  }
  if (tls) options.tls = { ...(ca ? { ca: [ca] } : {}), ...(cert && key ? { cert, key } : {}) };
  return { url, options };
}

/** A client for `conn`, with `extra` options (retries, lazyConnect...) laid over the connection's. */
export function createRedis(conn: RedisConnection, extra: RedisOptions = {}): Redis {
  return new Redis(conn.url, { ...conn.options, ...extra });
}

/** One line for the startup log: scheme, host and port, user, whether a password is used; never the password. */
export function describeRedis(conn: RedisConnection): string {
  try {
    const u = new URL(conn.url);
    const user = u.username || conn.options.username || 'default';
    const auth = u.password || conn.options.password !== undefined ? ` as ${user}` : '';
    return `${u.protocol}//${u.host}${auth}`;
  } catch {
    return 'redis (unparsable URL)';
  }
}
