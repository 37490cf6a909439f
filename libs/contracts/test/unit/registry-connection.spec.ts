import { PEM_TEXT, settingsIssues, tempFiles } from '@keyflow/testing/settings';
import { RegistryConnectionConfigError, registryConnectionFromEnv } from '../../src/registry-connection';
import { RegistryUnavailableError } from '../../src/errors';

const { file } = tempFiles('registry-connection-');

/** The issues of the settings error it throws. */
const issues = (env: NodeJS.ProcessEnv): string[] =>
  settingsIssues(() => registryConnectionFromEnv(env), RegistryConnectionConfigError);

describe('schema registry connection settings', () => {
  it('a plain URL is all the codec gets', () => {
    expect(
      registryConnectionFromEnv({ SCHEMA_REGISTRY_URL: 'http://127.0.0.1:8081/apis/ccompat/v7' }),
    ).toEqual({
      registryUrl: 'http://127.0.0.1:8081/apis/ccompat/v7',
    });
  });

  it('https with basic auth from a password file and a CA', () => {
    expect(
      registryConnectionFromEnv({
        SCHEMA_REGISTRY_URL: 'https://registry.example/apis/ccompat/v7',
        SCHEMA_REGISTRY_USERNAME: 'svc',
        SCHEMA_REGISTRY_PASSWORD_FILE: file('pw', 'p4ss\n'),
        SCHEMA_REGISTRY_CA_FILE: file('ca.pem', PEM_TEXT),
      }),
    ).toEqual({
      registryUrl: 'https://registry.example/apis/ccompat/v7',
      registryAuth: { username: 'svc', password: 'p4ss' },
      registryCa: PEM_TEXT,
    });
  });

  it('credentials in the URL become the basic auth and leave the URL (fetch refuses them; errors would show them)', () => {
    expect(
      registryConnectionFromEnv({ SCHEMA_REGISTRY_URL: 'https://svc:p%40ss@registry.example/ccompat' }),
    ).toEqual({
      registryUrl: 'https://registry.example/ccompat',
      registryAuth: { username: 'svc', password: 'p@ss' },
    });
    expect(
      issues({ SCHEMA_REGISTRY_URL: 'https://svc:x@registry.example', SCHEMA_REGISTRY_USERNAME: 'other' }),
    ).toEqual([expect.stringMatching(/carries credentials, and SCHEMA_REGISTRY_USERNAME/)]);
  });

  it('a user without a password and the reverse, both password forms, a CA with http:// and bad URLs are refused', () => {
    const http = 'http://r:1';
    expect(issues({ SCHEMA_REGISTRY_URL: http, SCHEMA_REGISTRY_USERNAME: 'u' })).toEqual([
      expect.stringMatching(/required with SCHEMA_REGISTRY_USERNAME/),
    ]);
    expect(issues({ SCHEMA_REGISTRY_URL: http, SCHEMA_REGISTRY_PASSWORD: 'p' })).toEqual([
      expect.stringMatching(/^SCHEMA_REGISTRY_USERNAME: required/),
    ]);
    expect(
      issues({
        SCHEMA_REGISTRY_URL: http,
        SCHEMA_REGISTRY_USERNAME: 'u',
        SCHEMA_REGISTRY_PASSWORD: 'p',
        SCHEMA_REGISTRY_PASSWORD_FILE: file('pw2', 'p'),
      }),
    ).toEqual([expect.stringMatching(/give one of them, not both/)]);
    expect(issues({ SCHEMA_REGISTRY_URL: http, SCHEMA_REGISTRY_CA_FILE: file('ca2.pem', PEM_TEXT) })).toEqual(
      [expect.stringMatching(/^SCHEMA_REGISTRY_CA_FILE: set, but SCHEMA_REGISTRY_URL is http:\/\//)],
    );
    expect(issues({ SCHEMA_REGISTRY_URL: 'ftp://r' })).toEqual([expect.stringMatching(/is not http/)]);
    expect(issues({})).toEqual([expect.stringMatching(/^SCHEMA_REGISTRY_URL: not a URL/)]);
  });

  it("an unavailable registry's error carries the reason fetch keeps in its cause", () => {
    const e = new RegistryUnavailableError(
      'GET /x',
      new TypeError('fetch failed', { cause: new Error('self-signed certificate') }),
    );
    expect(e.message).toBe(
      'schema registry unavailable during GET /x: fetch failed: self-signed certificate',
    );
  });
});
