import type { IHeaders } from '@keyflow/kafka';

/** Triage headers on every DLQ record (values are UTF-8 strings; times are ms since epoch). */
export const DLQ_HEADERS = {
  originalTopic: 'x-dlq-original-topic',
  originalPartition: 'x-dlq-original-partition',
  originalOffset: 'x-dlq-original-offset',
  errorClass: 'x-dlq-error-class',
  errorMessage: 'x-dlq-error-message',
  /** The error's machine-readable code, when it has one (e.g. INPUT_SCHEMA, DUPLICATE_COLUMN). */
  errorCode: 'x-dlq-error-code',
  attempts: 'x-dlq-attempts',
  firstFailureAt: 'x-dlq-first-failure-at',
  lastFailureAt: 'x-dlq-last-failure-at',
  consumerGroup: 'x-dlq-consumer-group',
  host: 'x-dlq-host',
  redriveCount: 'x-dlq-redrive-count',
  /**
   * On a stand-in DLQ record only: the original's value (and its own headers) could not be carried by any request
   * (see {@link sendToDlq}); says how many bytes it had. The original stays at its topic, partition and offset
   * (the headers above) until its retention ends. Such a record is never redriven.
   */
  omitted: 'x-dlq-omitted',
} as const;

/** The triage header names (a redrive strips them). */
export const OURS = new Set<string>(Object.values(DLQ_HEADERS));

export interface DeadLetter {
  errorClass: string;
  errorMessage: string;
  /** The error's `code`, when it has one: written as x-dlq-error-code. */
  errorCode?: string | null;
  attempts: number;
  firstFailureAt: number;
  lastFailureAt: number;
  consumerGroup: string;
}

/** Ledger key and in-memory id of a DLQ record: `<physical dlq topic>/<partition>/<offset>`. */
export const dlqRecordId = (physicalDlqTopic: string, partition: number, offset: string) =>
  `${physicalDlqTopic}/${partition}/${offset}`;

/**
 * Whether `text` is a Kafka offset's decimal text: digits, no sign, no leading zero (`05`, `5.0`, ` 5` and the empty
 * text would all be 5 to `Number` or `BigInt`, and name no record of their own).
 */
export const isOffsetText = (text: string): boolean => /^(0|[1-9]\d*)$/.test(text);

/** `task.extract` -> `task.extract.dlq`. */
export const dlqTopicFor = (topic: string) => `${topic}.dlq`;

export function header(headers: IHeaders | undefined, name: string): string | undefined {
  const v = headers?.[name];
  if (v === undefined || v === null) return undefined;
  return Array.isArray(v) ? v.at(-1)?.toString() : v.toString();
}
