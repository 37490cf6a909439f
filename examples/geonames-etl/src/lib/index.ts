// GeoNames ETL core: streaming readers, reference data, pure transforms, dedupe, idempotent sinks, reports.
// No Kafka here: workflow steps and worker handlers wire these together.
export { CITY_FIELDS, REJECT_REASONS, UNREADABLE_KEY, unreadable, unreadableOf } from './types';
export type {
  CityRecord,
  EnrichedCity,
  RawRecord,
  RejectReason,
  Rejection,
  Result,
  UnreadableRecord,
  ValidRecord,
} from './types';
export {
  EtlError,
  InputColumnError,
  InputParseError,
  NotAllowedError,
  SinkBusyError,
  SinkFailedError,
  UnsupportedFormatError,
} from './errors';
export {
  confinePostgresUrl,
  confineSource,
  confineSqlitePath,
  describePostgres,
  postgresSinkError,
  type EtlConfinement,
} from './confine';
export type { EtlErrorCode } from './errors';
export { decodeUtf8, markInvalidUtf8, markedOffset } from './encoding';
export type { Utf8Error, Utf8Result } from './encoding';
export {
  defaultCitiesPath,
  detectFormat,
  readCsv,
  readDefaultCities,
  readJsonArray,
  readJsonLines,
  readRecords,
} from './readers';
export type { InputFormat, ReadOptions } from './readers';
export { DEFAULT_CHUNK_SIZE, chunkRecords } from './chunk';
export type { Chunk } from './chunk';
export { createReferenceData, loadAdminTable, loadCountries, loadReferenceData } from './reference';
export type { AdminRow, CountryInfo, ReferenceData, ReferenceTables } from './reference';
export { enrich, normalize, parseCoordinate, roundDegrees, transformRecord, validate } from './transforms';
export type { CountryLookup } from './transforms';
export { dedupeChunk, dedupeKey, naturalKey } from './dedupe';
export type { DedupeResult, SeenKeys } from './dedupe';
export { processChunk } from './pipeline';
export type { ProcessedChunk, RejectedRecord } from './pipeline';
export { buildReport, chunkStats, emptyStats, mergeStats, regionLabel, withLoaded } from './report';
export type { EtlReport, EtlStats, SinkSummary } from './report';
export { COLUMNS, toRow } from './sinks/rows';
export type { SinkRow } from './sinks/rows';
export { createSqliteSink } from './sinks/sqlite';
export type { SqliteSinkOptions } from './sinks/sqlite';
export {
  createPostgresSink,
  POSTGRES_POOL_MAX,
  POSTGRES_SINK_APPLICATION,
  PostgresPools,
} from './sinks/postgres';
export type { PostgresSinkOptions } from './sinks/postgres';
export type { CitySink, UpsertResult } from './sinks/types';
