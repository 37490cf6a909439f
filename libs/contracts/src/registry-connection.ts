import type { CodecOptions } from './codec';
import { settingFileReader } from '@keyflow/errors';
import { SettingsError } from '@keyflow/errors';

/**
 * How a keyflow process reaches the schema registry, from the environment:
 *
 * | variable | meaning |
 * |---|---|
 * | `SCHEMA_REGISTRY_URL` | the Confluent-compatible API's base URL, `http://` or `https://` (Apicurio: `.../apis/ccompat/v7`) |
 * | `SCHEMA_REGISTRY_USERNAME` + `SCHEMA_REGISTRY_PASSWORD` or `SCHEMA_REGISTRY_PASSWORD_FILE` | HTTP basic auth (RFC 7617; the Confluent clients' `basic.auth.user.info`) |
 * | `SCHEMA_REGISTRY_CA_FILE` | PEM file of the CA(s) an https registry's certificate chains to (default: Node's CAs) |
 *
 * Credentials in the URL (`https://user:password@host/...`) are taken as the basic auth and removed from the URL.
 * Checked up front: a URL that is not http(s), a user without a password or the reverse, both password forms, a CA
 * file with an http:// URL (it would silently not be used), an unreadable, empty or non-PEM file.
 */
export type RegistryConnection = Pick<CodecOptions, 'registryUrl' | 'registryAuth' | 'registryCa'>;

/** A registry connection setting that cannot work; `issues` names each variable. Not retryable: fix the settings. */
export class RegistryConnectionConfigError extends SettingsError {
  readonly code = 'REGISTRY_CONNECTION_CONFIG';
  constructor(issues: string[]) {
    super('schema registry settings', issues);
  }
}

/**
 * The registry connection of `env` (see {@link RegistryConnection}).
 * @throws RegistryConnectionConfigError naming every setting that cannot work
 */
export function registryConnectionFromEnv(env: NodeJS.ProcessEnv = process.env): RegistryConnection {
  const issues: string[] = [];
  let url = env.SCHEMA_REGISTRY_URL?.trim() ?? '';
  let protocol = '';
  let fromUrl: { username: string; password: string } | undefined;
  try {
    const parsed = new URL(url);
    protocol = parsed.protocol;
    if (protocol !== 'http:' && protocol !== 'https:')
      issues.push(`SCHEMA_REGISTRY_URL: ${protocol}// is not http:// or https://`);
    if (parsed.username || parsed.password) {
      // Credentials in the URL (Confluent's basic.auth.credentials.source=URL): fetch refuses such URLs, and they
      // would show in errors, so they become the basic auth and leave the URL.
      fromUrl = {
        username: decodeURIComponent(parsed.username),
        password: decodeURIComponent(parsed.password),
      };
      parsed.username = '';
      parsed.password = '';
      url = parsed.toString().replace(/\/$/, url.endsWith('/') ? '/' : '');
    }
  } catch {
    issues.push('SCHEMA_REGISTRY_URL: not a URL (http://host:port/... or https://...)');
  }
  const read = settingFileReader(env, issues);

  if (
    fromUrl &&
    (env.SCHEMA_REGISTRY_USERNAME?.trim() ||
      env.SCHEMA_REGISTRY_PASSWORD ||
      env.SCHEMA_REGISTRY_PASSWORD_FILE?.trim())
  )
    issues.push(
      'SCHEMA_REGISTRY_URL: carries credentials, and SCHEMA_REGISTRY_USERNAME or a password is set too; give one of them',
    );
  const username = env.SCHEMA_REGISTRY_USERNAME?.trim() || fromUrl?.username || undefined;
  const inline = env.SCHEMA_REGISTRY_PASSWORD || fromUrl?.password || undefined;
  if (inline !== undefined && env.SCHEMA_REGISTRY_PASSWORD_FILE?.trim())
    issues.push('SCHEMA_REGISTRY_PASSWORD, SCHEMA_REGISTRY_PASSWORD_FILE: give one of them, not both');
  const password = inline ?? read('SCHEMA_REGISTRY_PASSWORD_FILE', 'secret');
  const passwordGiven = inline !== undefined || Boolean(env.SCHEMA_REGISTRY_PASSWORD_FILE?.trim());
  if (username && !passwordGiven)
    issues.push(
      'SCHEMA_REGISTRY_PASSWORD or SCHEMA_REGISTRY_PASSWORD_FILE: required with SCHEMA_REGISTRY_USERNAME',
    );
  if (!username && passwordGiven) issues.push('SCHEMA_REGISTRY_USERNAME: required with a registry password');
  if (env.SCHEMA_REGISTRY_CA_FILE?.trim() && protocol === 'http:')
    issues.push('SCHEMA_REGISTRY_CA_FILE: set, but SCHEMA_REGISTRY_URL is http:// (https:// uses it)');
  const ca = read('SCHEMA_REGISTRY_CA_FILE', 'pem');
  if (issues.length > 0) throw new RegistryConnectionConfigError(issues);
  return {
    registryUrl: url,
    ...(username && password ? { registryAuth: { username, password } } : {}),
    ...(ca ? { registryCa: ca } : {}),
  };
}
