import { KeyflowError, type ErrorCode } from '@keyflow/errors';
/** Base of every error of @keyflow/blobs: a stable `code` and whether trying again may succeed. */
export class BlobError extends KeyflowError {
  constructor(
    readonly code: ErrorCode,
    readonly retryable: boolean,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** No blob under this key (never written, or deleted by the sweeper). Not retryable. */
export class BlobNotFoundError extends BlobError {
  constructor(readonly key: string) {
    super('BLOB_NOT_FOUND', false, `no blob under ${JSON.stringify(key)} (never written, or swept)`);
  }
}

/** The key or reference is not of the form `[A-Za-z0-9_./-]+` without `..`. Not retryable. */
export class InvalidBlobKeyError extends BlobError {
  constructor(readonly key: string) {
    super('INVALID_BLOB_KEY', false, `invalid blob key ${JSON.stringify(key)}`);
  }
}

/** The bytes read back do not have the SHA-256 recorded at put time. Not retryable (the blob is damaged). */
export class BlobCorruptError extends BlobError {
  constructor(
    readonly key: string,
    readonly expected: string,
    readonly actual: string,
  ) {
    super('BLOB_CORRUPT', false, `blob ${key}: sha256 ${actual} read, ${expected} written`);
  }
}

/**
 * A payload is larger than its topic accepts and cannot go through the claim check (no blob store configured,
 * or larger than the store's own limit, KEYFLOW_BLOB_MAX_BYTES). Not retryable: the same payload fails again.
 */
export class PayloadTooLargeError extends BlobError {
  constructor(
    readonly what: string,
    readonly bytes: number,
    readonly limitBytes: number,
    reason: string,
  ) {
    super(
      'PAYLOAD_TOO_LARGE',
      false,
      `${what} is ${bytes} bytes, over the ${limitBytes}-byte limit of its topic, and ${reason}`,
    );
  }
}

/** The blob store configuration is invalid (names each bad variable). Not retryable. */
export class BlobConfigError extends BlobError {
  constructor(issues: string[]) {
    super(
      'BLOB_CONFIG',
      false,
      `invalid blob store configuration:\n${issues.map((i) => `  - ${i}`).join('\n')}`,
    );
  }
}
