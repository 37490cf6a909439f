import { PayloadTooLargeError } from './errors';
import { blobExpiresAt } from './retention';
import type { BlobStore } from './store';

export interface ClaimCheckOptions {
  /** The topics' max.message.bytes, in bytes. */
  maxMessageBytes: number;
  /** Largest payload the store takes, in bytes. */
  maxBlobBytes: number;
  /** Extra life of a blob past the retention of the records naming it, in ms. */
  graceMs: number;
}

/** A payload as it goes into a record: inline text, or an empty inline text and a `blob:` reference. */
export interface Checked {
  inline: string;
  ref: string | null;
}

/**
 * The claim check for user-sized payloads (handler outputs, step inputs, run state): a payload larger than
 * {@link thresholdBytes} (half the topic's max.message.bytes, leaving room for the record's other fields, headers
 * and batch overhead) is stored as a blob and the record carries its reference; the consumer resolves it.
 */
export class ClaimCheck {
  readonly thresholdBytes: number;
  constructor(
    readonly store: BlobStore | null,
    readonly o: ClaimCheckOptions,
  ) {
    this.thresholdBytes = Math.floor(o.maxMessageBytes / 2);
  }

  /** Whether `text` travels inline (at most {@link thresholdBytes} in UTF-8): {@link offload} then stores nothing. */
  fitsInline(text: string): boolean {
    return Buffer.byteLength(text, 'utf8') <= this.thresholdBytes;
  }

  /**
   * `text` inline when it fits, else stored under `key` (expiring per `retentionMs`, null = kept until superseded).
   * @param what names the payload in errors (e.g. `output of run/step`).
   * @param key the blob key, or a function that makes it (called only when the payload is stored).
   * @throws PayloadTooLargeError (code PAYLOAD_TOO_LARGE, not retryable) when it does not fit and there is no store,
   *   or it exceeds maxBlobBytes. Store failures (e.g. PostgreSQL down) are thrown as they are (retryable).
   */
  async offload(
    what: string,
    key: string | (() => string),
    text: string,
    retentionMs: number | null,
  ): Promise<Checked> {
    if (this.fitsInline(text)) return { inline: text, ref: null };
    const bytes = Buffer.byteLength(text, 'utf8');
    if (!this.store)
      throw new PayloadTooLargeError(what, bytes, this.thresholdBytes, 'no blob store is configured');
    if (bytes > this.o.maxBlobBytes)
      throw new PayloadTooLargeError(
        what,
        bytes,
        this.thresholdBytes,
        `over the claim check's limit of ${this.o.maxBlobBytes} bytes (KEYFLOW_BLOB_MAX_BYTES)`,
      );
    const now = Date.now();
    const r = await this.store.put(typeof key === 'function' ? key() : key, text, {
      createdAt: now,
      expiresAt: blobExpiresAt(now, retentionMs, this.o.graceMs),
    });
    return { inline: '', ref: r.ref };
  }

  /**
   * The payload of a record: `inline` when `ref` is null, else the blob's text.
   * @throws BlobNotFoundError (swept or never written), PayloadTooLargeError when a ref arrives and no store is set.
   */
  async resolve(inline: string, ref: string | null | undefined): Promise<string> {
    if (!ref) return inline;
    if (!this.store)
      throw new PayloadTooLargeError(ref, 0, this.thresholdBytes, 'no blob store is configured to read it');
    return (await this.store.get(ref)).toString('utf8');
  }
}
