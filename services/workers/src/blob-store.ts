/**
 * Injection token of the claim-check store (`@keyflow/blobs` BlobStore: filesystem or PostgreSQL, selected by
 * KEYFLOW_BLOB_STORE). Handlers take it with `@Inject(BLOB_STORE)`.
 */
export const BLOB_STORE = Symbol('BlobStore');
