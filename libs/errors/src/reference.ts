import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ERROR_CODES, type ErrorCode } from './codes';

/** Where the error code reference lives, relative to the repository root. */
export const ERROR_REFERENCE_PATH = 'docs/reference/errors.md';

/** How a code's retry flag reads in the reference. */
const flagText = (r: boolean | 'per-instance'): string =>
  r === 'per-instance' ? 'per error' : r ? 'yes' : 'no';

/**
 * The text of docs/reference/errors.md, made from {@link ERROR_CODES} (one table row per code, in the list's
 * order). Regenerate with `npm run -w @keyflow/errors docs`; libs/errors' unit test fails when the file is stale.
 */
export function errorReferenceMarkdown(): string {
  const rows = (Object.keys(ERROR_CODES) as ErrorCode[]).map((code) => {
    const { retryable, doc } = ERROR_CODES[code];
    return `| \`${code}\` | ${flagText(retryable)} | ${doc.replace(/\|/g, '\\|')} |`;
  });
  return [
    '# Error codes',
    '',
    '<!-- Generated from libs/errors/src/codes.ts by `npm run -w @keyflow/errors docs`; do not edit by hand. -->',
    '',
    'Every error keyflow throws on purpose extends `KeyflowError` (`@keyflow/errors`): it has a stable `code` from',
    'the closed list below and says whether trying again may help (`retryable`). Decide by `code` and `retryable`',
    '(`isRetryable(e)` for any thrown value), never by class name or message text. The codes that reach HTTP',
    "answers (the body's `code`), TaskFailed records (`error.code`) and DLQ records (`x-dlq-error-code`) are part of",
    'the API and DLQ contract: their text does not change.',
    '',
    'Retryable: **yes** (the cause is transient: the same operation may succeed later), **no** (it fails the same',
    'way until something is fixed), **per error** (the error says so itself, e.g. by its HTTP status).',
    '',
    'A task handler may throw a `TaskError` with a code of its own (e.g. `DECLINED`); an application may give its',
    "own error family its own codes (`KeyflowError<ItsCodes>`). Those are the application's, not listed here.",
    '',
    '| Code | Retryable | Meaning |',
    '| --- | --- | --- |',
    ...rows,
    '',
  ].join('\n');
}

/** Writes {@link errorReferenceMarkdown} to {@link ERROR_REFERENCE_PATH} under `root`. */
export function writeErrorReference(root: string): void {
  writeFileSync(join(root, ERROR_REFERENCE_PATH), errorReferenceMarkdown());
}

if (require.main === module) writeErrorReference(join(__dirname, '../../..'));
