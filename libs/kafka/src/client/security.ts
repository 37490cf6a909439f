import type { ConnectionOptions } from 'node:tls';
import type { SASLOptions } from 'kafkajs';
import { settingFileReader, SettingsError } from '@keyflow/errors';
import { KAFKA_SASL_MECHANISMS, SecuritySchema, unsetIfEmpty } from './options';
import type { KafkaSecurity } from './types';

/** A Kafka connection setting that cannot work; `issues` names each variable. Not retryable: fix the settings. */
export class KafkaSecurityConfigError extends SettingsError {
  readonly code = 'KAFKA_SECURITY_CONFIG';
  constructor(issues: string[]) {
    super('Kafka connection settings', issues);
  }
}

/**
 * The connection settings of `env` (see {@link KafkaSecurity} for the variables and rules).
 * @throws KafkaSecurityConfigError naming every setting that cannot work
 */
export function kafkaSecurityFromEnv(env: NodeJS.ProcessEnv = process.env): KafkaSecurity {
  const parsed = SecuritySchema.safeParse(unsetIfEmpty(env));
  if (!parsed.success)
    throw new KafkaSecurityConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`));
  const c = parsed.data;
  const issues: string[] = [];
  const protocol = c.KAFKA_SECURITY_PROTOCOL;
  const sasl = protocol.startsWith('SASL_');
  const tls = protocol.endsWith('SSL');
  const read = settingFileReader(c, issues);

  const saslSet = (
    [
      'KAFKA_SASL_MECHANISM',
      'KAFKA_SASL_USERNAME',
      'KAFKA_SASL_PASSWORD',
      'KAFKA_SASL_PASSWORD_FILE',
    ] as const
  ).filter((k) => c[k] !== undefined);
  if (!sasl && saslSet.length > 0)
    issues.push(
      `${saslSet.join(', ')}: set, but KAFKA_SECURITY_PROTOCOL is ${protocol} (SASL_SSL or SASL_PLAINTEXT uses them)`,
    );
  const tlsSet = (['KAFKA_SSL_CA_FILE', 'KAFKA_SSL_CERT_FILE', 'KAFKA_SSL_KEY_FILE'] as const).filter(
    (k) => c[k] !== undefined,
  );
  if (!tls && tlsSet.length > 0)
    issues.push(
      `${tlsSet.join(', ')}: set, but KAFKA_SECURITY_PROTOCOL is ${protocol} (SSL or SASL_SSL uses them)`,
    );

  let saslOptions: SASLOptions | undefined;
  if (sasl) {
    if (!c.KAFKA_SASL_MECHANISM)
      issues.push(
        `KAFKA_SASL_MECHANISM: required with ${protocol} (one of ${KAFKA_SASL_MECHANISMS.join(', ')})`,
      );
    if (!c.KAFKA_SASL_USERNAME) issues.push(`KAFKA_SASL_USERNAME: required with ${protocol}`);
    if (c.KAFKA_SASL_PASSWORD !== undefined && c.KAFKA_SASL_PASSWORD_FILE !== undefined)
      issues.push('KAFKA_SASL_PASSWORD, KAFKA_SASL_PASSWORD_FILE: give one of them, not both');
    const password = c.KAFKA_SASL_PASSWORD ?? read('KAFKA_SASL_PASSWORD_FILE', 'secret');
    if (c.KAFKA_SASL_PASSWORD === undefined && c.KAFKA_SASL_PASSWORD_FILE === undefined)
      issues.push(`KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE: required with ${protocol}`);
    if (c.KAFKA_SASL_MECHANISM && c.KAFKA_SASL_USERNAME && password) {
      const username = c.KAFKA_SASL_USERNAME;
      saslOptions =
        c.KAFKA_SASL_MECHANISM === 'PLAIN'
          ? { mechanism: 'plain', username, password }
          : c.KAFKA_SASL_MECHANISM === 'SCRAM-SHA-256'
            ? { mechanism: 'scram-sha-256', username, password }
            : { mechanism: 'scram-sha-512', username, password };
    }
  }

  let ssl: false | ConnectionOptions = false;
  if (tls) {
    if ((c.KAFKA_SSL_CERT_FILE === undefined) !== (c.KAFKA_SSL_KEY_FILE === undefined))
      issues.push(
        'KAFKA_SSL_CERT_FILE, KAFKA_SSL_KEY_FILE: give both (a client certificate and its key) or neither',
      );
    const ca = read('KAFKA_SSL_CA_FILE', 'pem');
    const cert = read('KAFKA_SSL_CERT_FILE', 'pem');
    const key = read('KAFKA_SSL_KEY_FILE', 'pem');
    // Certificates are always verified against the CA and the broker's host name (Node's defaults): no setting
    // turns verification off.
    ssl = { ...(ca ? { ca: [ca] } : {}), ...(cert && key ? { cert, key } : {}) };
  }
  if (issues.length > 0) throw new KafkaSecurityConfigError(issues);
  return { protocol, ssl, ...(saslOptions ? { sasl: saslOptions } : {}) };
}

/** One line for the startup log: protocol, mechanism and user; never a password or key. */
export function describeKafkaSecurity(s: KafkaSecurity): string {
  if (!s.sasl) return s.protocol;
  return `${s.protocol} ${s.sasl.mechanism.toUpperCase()} as ${(s.sasl as { username: string }).username}`;
}
