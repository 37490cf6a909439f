import { z } from 'zod';
import { BlobConfigError } from './errors';
import { FsBlobStore } from './fs-store';
import { PgBlobStore } from './pg-store';
import { DEFAULT_BLOB_GRACE_MS } from './retention';
import { ClaimCheck } from './claim-check';
import type { BlobStore } from './store';

/**
 * Kafka's default `message.max.bytes` (broker) and `max.message.bytes` (topic): the largest record batch a topic
 * accepts, in bytes (https://kafka.apache.org/documentation/#brokerconfigs_message.max.bytes). Keyflow creates its
 * topics without overriding it; set KEYFLOW_MAX_MESSAGE_BYTES when the cluster's value differs.
 */
export const KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588;

/**
 * The blob store and size-limit settings, shared by the orchestrator's and the workers' configuration (spread into
 * their zod schemas).
 */
export const BlobConfigSchema = {
  /** `fs` (one host's directory, KEYFLOW_BLOB_DIR) or `postgres` (shared, KEYFLOW_BLOB_URL). */
  KEYFLOW_BLOB_STORE: z.enum(['fs', 'postgres']).default('fs'),
  /**
   * The `fs` store's directory (relative to the working directory); one host's, so workers on several hosts use `postgres`.
   */
  KEYFLOW_BLOB_DIR: z.string().min(1).default('.keyflow/blobs'),
  /** postgres:// URL of the shared store (required with KEYFLOW_BLOB_STORE=postgres). */
  KEYFLOW_BLOB_URL: z.string().default(''),
  /** PostgreSQL schema of the blob tables. */
  KEYFLOW_BLOB_SCHEMA: z
    .string()
    .regex(/^[a-z_][a-z0-9_]*$/, 'a lowercase SQL identifier')
    .default('keyflow_blobs'),
  /** The topics' max.message.bytes in bytes; payloads over half of it go through the claim check. */
  KEYFLOW_MAX_MESSAGE_BYTES: z.coerce.number().int().min(1024).default(KAFKA_DEFAULT_MAX_MESSAGE_BYTES),
  /** Largest payload the claim check accepts, in bytes (default 256 MiB); a larger one fails with PAYLOAD_TOO_LARGE. */
  KEYFLOW_BLOB_MAX_BYTES: z.coerce
    .number()
    .int()
    .min(1)
    .default(256 * 1024 * 1024),
  /** How long a blob outlives the records naming it, in ms (see retention.ts). */
  KEYFLOW_BLOB_GRACE_MS: z.coerce.number().int().min(0).default(DEFAULT_BLOB_GRACE_MS),
};

const Schema = z.object(BlobConfigSchema);
export type BlobConfig = z.infer<typeof Schema>;

/** @throws BlobConfigError naming each bad variable. */
export function loadBlobConfig(env: NodeJS.ProcessEnv = process.env): BlobConfig {
  const parsed = Schema.safeParse(env);
  if (!parsed.success)
    throw new BlobConfigError(parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`));
  if (
    parsed.data.KEYFLOW_BLOB_STORE === 'postgres' &&
    !/^postgres(ql)?:\/\//.test(parsed.data.KEYFLOW_BLOB_URL)
  )
    throw new BlobConfigError([
      'KEYFLOW_BLOB_URL: a postgres:// URL is required with KEYFLOW_BLOB_STORE=postgres',
    ]);
  return parsed.data;
}

/** The store the configuration selects. */
export function createBlobStore(c: BlobConfig): BlobStore {
  return c.KEYFLOW_BLOB_STORE === 'postgres'
    ? new PgBlobStore({ url: c.KEYFLOW_BLOB_URL, schema: c.KEYFLOW_BLOB_SCHEMA })
    : new FsBlobStore(c.KEYFLOW_BLOB_DIR);
}

/** The claim check the configuration describes, over `store` (default: the configured store). */
export function claimCheckFromConfig(c: BlobConfig, store: BlobStore = createBlobStore(c)): ClaimCheck {
  return new ClaimCheck(store, {
    maxMessageBytes: c.KEYFLOW_MAX_MESSAGE_BYTES,
    maxBlobBytes: c.KEYFLOW_BLOB_MAX_BYTES,
    graceMs: c.KEYFLOW_BLOB_GRACE_MS,
  });
}
