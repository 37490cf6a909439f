export { EventCodec, type CodecOptions, type DecodedEvent } from './codec';
export { newMetadata, type MetadataInput } from './metadata';
export { subjectFor } from './subjects';
export { parseWireFormat, toWireFormat, MAGIC_BYTE, HEADER_BYTES } from './wire';
export * from './errors';
export { derivedEventId, KEYFLOW_EVENT_ID_NAMESPACE, DERIVED_EVENT_ID_LENGTH } from './event-id';
export {
  registryConnectionFromEnv,
  RegistryConnectionConfigError,
  type RegistryConnection,
} from './registry-connection';
export { settingFileReader } from '@keyflow/errors';
export { avroType } from './avro-type';
export { avroPiiMarks, maskAvroPii, maskWithType, marksAny, mergeMarks, type PiiMarks } from './pii';
export {
  PayloadSerde,
  NoBlobStoreError,
  PayloadNotJsonError,
  PayloadInvalidError,
  CLAIM_CHECKED_FIELDS,
  failureOf,
  unreadableResultAsFailure,
  type PayloadBlobs,
  type PayloadCheck,
} from './payload-serde';
