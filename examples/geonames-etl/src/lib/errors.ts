import { KeyflowError } from '@keyflow/errors';
/** Machine-readable codes of the ETL library's errors. */
export type EtlErrorCode =
  | 'INPUT_PARSE'
  | 'UNSUPPORTED_FORMAT'
  | 'DUPLICATE_COLUMN'
  | 'EMPTY_COLUMN'
  | 'SINK_BUSY'
  | 'SOURCE_NOT_ALLOWED'
  | 'SINK_NOT_ALLOWED'
  | 'SINK_FAILED';

/**
 * The one error base of the ETL library: a stable `code` and whether another attempt can help (`retryable`).
 * Every error about the input itself is not retryable: the same file fails the same way.
 */
export abstract class EtlError extends KeyflowError<EtlErrorCode> {
  abstract override readonly code: EtlErrorCode;
}

/**
 * The input could not be read as records: malformed JSON/CSV, or a value that is not a record object.
 * `line` is 1-based in the input file (the line where the problem was found), when known. Not retryable.
 */
export class InputParseError extends EtlError {
  readonly code: EtlErrorCode = 'INPUT_PARSE';
  readonly retryable = false;
  constructor(
    readonly path: string,
    readonly line: number | undefined,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`${path}${line === undefined ? '' : `:${line}`}: ${reason}`, options);
  }
}

/**
 * A CSV header names a column twice (`DUPLICATE_COLUMN`: `column` is the name, `positions` its 1-based
 * columns) or has a column without a name (`EMPTY_COLUMN`: `column` is '', `positions` the blank ones).
 * No record of such a file is read: which value a duplicated name stands for cannot be told. Not retryable.
 */
export class InputColumnError extends InputParseError {
  override readonly code: 'DUPLICATE_COLUMN' | 'EMPTY_COLUMN';
  constructor(
    path: string,
    readonly column: string,
    readonly positions: readonly number[],
  ) {
    super(
      path,
      1,
      column === ''
        ? `CSV header: ${positions.length === 1 ? 'column' : 'columns'} ${list(positions)} ${positions.length === 1 ? 'has' : 'have'} no name`
        : `CSV header: column ${JSON.stringify(column)} appears ${positions.length === 2 ? 'twice' : `${positions.length} times`} (columns ${list(positions)})`,
    );
    this.code = column === '' ? 'EMPTY_COLUMN' : 'DUPLICATE_COLUMN';
  }
}

function list(items: readonly number[]): string {
  return items.length < 2
    ? items.join('')
    : `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]}`;
}

/** The input format could not be determined from the file extension and no override was given. Not retryable. */
export class UnsupportedFormatError extends EtlError {
  readonly code = 'UNSUPPORTED_FORMAT' as const;
  readonly retryable = false;
  constructor(readonly path: string) {
    super(
      `cannot tell the input format of ${path} from its extension: use .json, .jsonl, .ndjson or .csv, or pass a format`,
    );
  }
}

/**
 * A sink's writer lock stayed taken by another connection (another worker process loading the same SQLite file)
 * for `waitedMs` (the sink's `busyTimeoutMs`), and nothing was written. Retryable: the lock is released when the
 * other writer commits.
 */
export class SinkBusyError extends EtlError {
  readonly code = 'SINK_BUSY' as const;
  readonly retryable = true;
  constructor(
    readonly table: string,
    readonly waitedMs: number,
    options?: { cause?: unknown },
  ) {
    super(
      `sink table "${table}": the writer lock stayed taken by another connection for ${waitedMs} ms`,
      options,
    );
  }
}

/**
 * A run's input named a source (`SOURCE_NOT_ALLOWED`) or a sink (`SINK_NOT_ALLOWED`) outside what the worker's
 * settings allow (ETL_INPUT_ROOTS, ETL_SQLITE_ROOTS, ETL_POSTGRES_URLS; see confine.ts). The message names the setting,
 * never what lies at the refused place (whether it exists, what it is). Not retryable: the same input is refused again.
 */
export class NotAllowedError extends EtlError {
  readonly code: 'SOURCE_NOT_ALLOWED' | 'SINK_NOT_ALLOWED';
  readonly retryable = false;
  constructor(code: 'SOURCE_NOT_ALLOWED' | 'SINK_NOT_ALLOWED', message: string) {
    super(message);
    this.code = code;
  }
}

/**
 * A PostgreSQL sink failed (connecting, or a query): the message names the target (host:port/database, from the
 * allowed URL) and the error's code (SQLSTATE or errno), never the server's own text, so a run's visible error carries
 * nothing the server said. Retryable when the failure can pass (a connection refused, reset or timed out; SQLSTATE
 * classes 08 connection, 40 transaction rollback, 53 insufficient resources, 57 operator intervention), not otherwise.
 */
export class SinkFailedError extends EtlError {
  readonly code = 'SINK_FAILED' as const;
  constructor(
    readonly target: string,
    readonly causeCode: string | undefined,
    readonly retryable: boolean,
    options?: { cause?: unknown },
  ) {
    super(`PostgreSQL sink ${target} failed${causeCode ? ` (${causeCode})` : ''}`, options);
  }
}
