import { join } from 'node:path';
import { PEM_TEXT, settingsIssues, tempFiles } from '@keyflow/testing/settings';
import {
  describeKafkaSecurity,
  KafkaSecurityConfigError,
  kafkaSecurityFromEnv,
} from '../../src/client/security';

const { file, dir } = tempFiles('kafka-security-');
const ca = file('ca.pem', PEM_TEXT);

/** The issues of the settings error it throws. */
const issues = (env: NodeJS.ProcessEnv): string[] =>
  settingsIssues(() => kafkaSecurityFromEnv(env), KafkaSecurityConfigError);

describe('Kafka connection settings', () => {
  it('default to plaintext without SASL', () => {
    expect(kafkaSecurityFromEnv({})).toEqual({ protocol: 'PLAINTEXT', ssl: false });
  });

  it('SASL_SSL with SCRAM-SHA-512 gives kafkajs the mechanism, user, password from its file and the CA', () => {
    const s = kafkaSecurityFromEnv({
      KAFKA_SECURITY_PROTOCOL: 'SASL_SSL',
      KAFKA_SASL_MECHANISM: 'SCRAM-SHA-512',
      KAFKA_SASL_USERNAME: 'svc',
      KAFKA_SASL_PASSWORD_FILE: file('pw', 's3cret\n'),
      KAFKA_SSL_CA_FILE: ca,
    });
    expect(s).toEqual({
      protocol: 'SASL_SSL',
      ssl: { ca: [PEM_TEXT] },
      sasl: { mechanism: 'scram-sha-512', username: 'svc', password: 's3cret' },
    });
    expect(describeKafkaSecurity(s)).toBe('SASL_SSL SCRAM-SHA-512 as svc');
    expect(describeKafkaSecurity(s)).not.toContain('s3cret');
  });

  it('an empty variable counts as unset (a template that leaves KAFKA_SSL_CA_FILE= empty)', () => {
    expect(
      kafkaSecurityFromEnv({
        KAFKA_SECURITY_PROTOCOL: 'SSL',
        KAFKA_SSL_CA_FILE: '',
        KAFKA_SASL_USERNAME: ' ',
      }),
    ).toEqual({
      protocol: 'SSL',
      ssl: {},
    });
  });

  it('SSL without a CA file trusts the default CAs; SASL_PLAINTEXT uses no TLS', () => {
    expect(kafkaSecurityFromEnv({ KAFKA_SECURITY_PROTOCOL: 'SSL' })).toEqual({ protocol: 'SSL', ssl: {} });
    expect(
      kafkaSecurityFromEnv({
        KAFKA_SECURITY_PROTOCOL: 'SASL_PLAINTEXT',
        KAFKA_SASL_MECHANISM: 'PLAIN',
        KAFKA_SASL_USERNAME: 'u',
        KAFKA_SASL_PASSWORD: 'p',
      }),
    ).toEqual({
      protocol: 'SASL_PLAINTEXT',
      ssl: false,
      sasl: { mechanism: 'plain', username: 'u', password: 'p' },
    });
  });

  it('a SASL protocol without mechanism, user or password names each missing setting', () => {
    const found = issues({ KAFKA_SECURITY_PROTOCOL: 'SASL_SSL' });
    expect(found).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^KAFKA_SASL_MECHANISM: required with SASL_SSL/),
        expect.stringMatching(/^KAFKA_SASL_USERNAME: required/),
        expect.stringMatching(/^KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE: required/),
      ]),
    );
  });

  it('credentials or TLS files with a protocol that would not use them are refused, not silently ignored', () => {
    expect(issues({ KAFKA_SASL_USERNAME: 'u', KAFKA_SASL_PASSWORD: 'p' })).toEqual([
      expect.stringMatching(
        /KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD: set, but KAFKA_SECURITY_PROTOCOL is PLAINTEXT/,
      ),
    ]);
    expect(
      issues({
        KAFKA_SECURITY_PROTOCOL: 'SASL_PLAINTEXT',
        KAFKA_SASL_MECHANISM: 'PLAIN',
        KAFKA_SASL_USERNAME: 'u',
        KAFKA_SASL_PASSWORD: 'p',
        KAFKA_SSL_CA_FILE: ca,
      }),
    ).toEqual([
      expect.stringMatching(/KAFKA_SSL_CA_FILE: set, but KAFKA_SECURITY_PROTOCOL is SASL_PLAINTEXT/),
    ]);
  });

  it('unknown protocols and mechanisms, both password forms, a lone client certificate and unreadable or non-PEM files are refused', () => {
    expect(issues({ KAFKA_SECURITY_PROTOCOL: 'TLS' })[0]).toMatch(/^KAFKA_SECURITY_PROTOCOL: /);
    expect(issues({ KAFKA_SECURITY_PROTOCOL: 'SASL_SSL', KAFKA_SASL_MECHANISM: 'GSSAPI' })[0]).toMatch(
      /^KAFKA_SASL_MECHANISM: /,
    );
    const both = issues({
      KAFKA_SECURITY_PROTOCOL: 'SASL_SSL',
      KAFKA_SASL_MECHANISM: 'SCRAM-SHA-256',
      KAFKA_SASL_USERNAME: 'u',
      KAFKA_SASL_PASSWORD: 'p',
      KAFKA_SASL_PASSWORD_FILE: file('pw2', 'p'),
    });
    expect(both).toEqual([expect.stringMatching(/give one of them, not both/)]);
    expect(issues({ KAFKA_SECURITY_PROTOCOL: 'SSL', KAFKA_SSL_CERT_FILE: ca })).toEqual([
      expect.stringMatching(/KAFKA_SSL_CERT_FILE, KAFKA_SSL_KEY_FILE: give both/),
    ]);
    expect(issues({ KAFKA_SECURITY_PROTOCOL: 'SSL', KAFKA_SSL_CA_FILE: join(dir, 'missing.pem') })).toEqual([
      expect.stringMatching(/^KAFKA_SSL_CA_FILE: cannot read .*missing\.pem/),
    ]);
    expect(issues({ KAFKA_SECURITY_PROTOCOL: 'SSL', KAFKA_SSL_CA_FILE: file('junk.pem', 'junk') })).toEqual([
      expect.stringMatching(/^KAFKA_SSL_CA_FILE: .*junk\.pem holds no PEM block/),
    ]);
    expect(
      issues({
        KAFKA_SECURITY_PROTOCOL: 'SASL_SSL',
        KAFKA_SASL_MECHANISM: 'PLAIN',
        KAFKA_SASL_USERNAME: 'u',
        KAFKA_SASL_PASSWORD_FILE: file('empty', ''),
      }),
    ).toEqual([expect.stringMatching(/KAFKA_SASL_PASSWORD_FILE: .* is empty/)]);
  });
});
