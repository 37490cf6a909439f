import type { ConnectionOptions } from 'node:tls';
import type { SASLOptions } from 'kafkajs';
import { z } from 'zod';
import { settingFileReader, SettingsError } from '@keyflow/errors';

/**
 * How every keyflow process connects to Kafka, read from the environment with the Java client's names and values
 * (Kafka docs "Security": `security.protocol`, `sasl.mechanism`):
 *
 * | variable | meaning |
 * |---|---|
 * | `KAFKA_SECURITY_PROTOCOL` | `PLAINTEXT` (default), `SSL`, `SASL_PLAINTEXT` or `SASL_SSL` |
 * | `KAFKA_SASL_MECHANISM` | `SCRAM-SHA-512`, `SCRAM-SHA-256` or `PLAIN` (RFC 5802 / RFC 7677 / RFC 4616); SASL_* only |
 * | `KAFKA_SASL_USERNAME` | the SASL user |
 * | `KAFKA_SASL_PASSWORD` or `KAFKA_SASL_PASSWORD_FILE` | its password, or a file holding it (one of the two) |
 * | `KAFKA_SSL_CA_FILE` | PEM file of the CA(s) the brokers' certificates chain to (default: Node's bundled CAs) |
 * | `KAFKA_SSL_CERT_FILE` + `KAFKA_SSL_KEY_FILE` | PEM client certificate and key, for brokers that require mTLS |
 *
 * Every rule is checked at startup, so a process with settings that cannot work does not start: SASL settings without
 * a SASL protocol (credentials that would silently not be used), TLS files without a TLS protocol, a certificate
 * without its key, a file that cannot be read or holds no PEM block.
 */
export interface KafkaSecurity {
  protocol: KafkaSecurityProtocol;
  /** kafkajs `ssl`: false for PLAINTEXT and SASL_PLAINTEXT. */
  ssl: false | ConnectionOptions;
  /** kafkajs `sasl`, or undefined without SASL. */
  sasl?: SASLOptions;
}

export const KAFKA_SECURITY_PROTOCOLS = ['PLAINTEXT', 'SSL', 'SASL_PLAINTEXT', 'SASL_SSL'] as const;
export type KafkaSecurityProtocol = (typeof KAFKA_SECURITY_PROTOCOLS)[number];
export const KAFKA_SASL_MECHANISMS = ['SCRAM-SHA-512', 'SCRAM-SHA-256', 'PLAIN'] as const;

/** A Kafka connection setting that cannot work; `issues` names each variable. Not retryable: fix the settings. */
export class KafkaSecurityConfigError extends SettingsError {
  readonly code = 'KAFKA_SECURITY_CONFIG';
  constructor(issues: string[]) {
    super('Kafka connection settings', issues);
  }
}

const nonEmpty = z.string().trim().min(1).optional();
/** An empty variable (a template's `KAFKA_SSL_CA_FILE=`) counts as unset. */
const unsetIfEmpty = (env: NodeJS.ProcessEnv): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(env).filter(([k, v]) => !(k.startsWith('KAFKA_') && v?.trim() === '')));

const Schema = z.object({
  KAFKA_SECURITY_PROTOCOL: z.enum(KAFKA_SECURITY_PROTOCOLS).default('PLAINTEXT'),
  KAFKA_SASL_MECHANISM: z.enum(KAFKA_SASL_MECHANISMS).optional(),
  KAFKA_SASL_USERNAME: nonEmpty,
  KAFKA_SASL_PASSWORD: z.string().min(1).optional(),
  KAFKA_SASL_PASSWORD_FILE: nonEmpty,
  KAFKA_SSL_CA_FILE: nonEmpty,
  KAFKA_SSL_CERT_FILE: nonEmpty,
  KAFKA_SSL_KEY_FILE: nonEmpty,
});

/**
 * The connection settings of `env` (see {@link KafkaSecurity} for the variables and rules).
 * @throws KafkaSecurityConfigError naming every setting that cannot work
 */
export function kafkaSecurityFromEnv(env: NodeJS.ProcessEnv = process.env): KafkaSecurity {
  const parsed = Schema.safeParse(unsetIfEmpty(env));
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
