/**
 * `@keyflow/testing/kafkajs-encoders`: kafkajs's produce request encoders (./src/kafkajs-encoders) without the
 * containers and clients the package's main entry loads, for the unit test and the bench that compare the patched and
 * the unpatched kafkajs (a bench holding that entry's modules ran the encoders at about twice the time per request).
 */
export { produceRequestEncoder } from './src/kafkajs-encoders';
