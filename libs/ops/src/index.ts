/**
 * @keyflow/ops: what operators and the services do with keyflow's dead letters and consumer groups, on top of
 * @keyflow/kafka: DLQ writing (record shape, size limits, retention), redrive and discard, the DLQ ledger, DLQ
 * listings and summaries, read_committed range scans and consumer group lag, and the topic catalog rules those act on.
 * Module order (no cycles): catalog, dlq-headers, scan -> dlq-ledger -> dlq, lag, dlq-summary -> redrive ->
 * dlq-records, dlq-rerun.
 */
export { taskTypeOfTopic, isCatalogDlq, catalogDlqSource } from './catalog';
export { DLQ_HEADERS, dlqRecordId, dlqTopicFor, header, type DeadLetter } from './dlq-headers';
export {
  dlqMessage,
  sendToDlq,
  DLQ_ERROR_MESSAGE_MAX_BYTES,
  DLQ_HEADROOM_BYTES,
  dlqLimitBytes,
  dlqTopicConfigs,
  dlqRetention,
  alignDlqLimits,
  truncateUtf8,
  dlqStandIn,
  fitDlqRecord,
  RecordTooLargeError,
  REQUEST_RECORD_MAX_BYTES,
  SOCKET_REQUEST_MAX_BYTES,
} from './dlq';
export {
  redrive,
  matchesRedriveFilter,
  NOT_OWN_SOURCE,
  SOURCE_TOPIC_MISSING,
  REPORT_RECORDS_MAX,
  type RedriveFilter,
  type RedriveReport,
  type RedriveRefusal,
  type RedriveAdmit,
  type RedriveOptions,
} from './redrive';
export {
  DLQ_LEDGER_TOPIC,
  DLQ_LEDGER_PARTITIONS,
  ensureDlqLedger,
  ledgerMessage,
  readDlqLedger,
  DlqLedgerView,
  handledEntryOf,
  HandledOffsets,
  DLQ_LEDGER_RETENTION_MS,
  handledBy,
  type HandledEntry,
  type DlqAction,
  type LedgerCodec,
} from './dlq-ledger';
export { describeDlqRecord, readDlqRecords, type DlqRecord } from './dlq-records';
export { rerunAdmission, UNDECODABLE_COMMAND, type CheckedCommand, type RerunFactsOf } from './dlq-rerun';
export { lastStableOffsets, resumePosition, scanRanges, type ScanRange } from './scan';
export { groupLag, SCAN_GROUP_PREFIXES, type PartitionLag } from './lag';
export { listDlqTopics, summarizeDlqs, type DlqSummary } from './dlq-summary';
export { flowKeys } from './flow-keys';
