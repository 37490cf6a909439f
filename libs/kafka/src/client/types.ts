import type { ConnectionOptions } from 'node:tls';
import type { SASLOptions } from 'kafkajs';
import type { KAFKA_SECURITY_PROTOCOLS } from './options';

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

export type KafkaSecurityProtocol = (typeof KAFKA_SECURITY_PROTOCOLS)[number];
