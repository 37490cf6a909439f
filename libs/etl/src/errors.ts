/**
 * The input could not be read as records: malformed JSON/CSV, or a value that is not a record object.
 * `line` is 1-based in the input file (the line where the problem was found), when known.
 */
export class InputParseError extends Error {
  override readonly name = 'InputParseError';
  constructor(
    readonly path: string,
    readonly line: number | undefined,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`${path}${line === undefined ? '' : `:${line}`}: ${reason}`, options);
  }
}

/** The input format could not be determined from the file extension and no override was given. */
export class UnsupportedFormatError extends Error {
  override readonly name = 'UnsupportedFormatError';
  constructor(readonly path: string) {
    super(
      `cannot tell the input format of ${path} from its extension: use .json, .jsonl, .ndjson or .csv, or pass a format`,
    );
  }
}
