/**
 * `@keyflow/testing/kcat`: the kcat and Java client helpers (./src/kcat) without the containers and clients the
 * package's main entry loads, for unit tests that only build payloads (longRangeRepeats).
 */
export * from './src/kcat';
