/**
 * The one error base of keyflow (the pattern of platformatic/kafka's closed error codes and Temporal's explicit
 * non-retryable failures): every error a keyflow lib or service throws on purpose extends {@link KeyflowError},
 * so a caller decides by `retryable` (retry it, or dead-letter / report it) and by `code` (a stable, documented
 * string), never by class name or message text.
 */
export abstract class KeyflowError extends Error {
  /** Stable machine-readable code (UPPER_SNAKE_CASE), documented where the error is defined. */
  abstract readonly code: string;
  /** Whether the same operation may succeed if tried again (the cause is transient), or never will. */
  abstract readonly retryable: boolean;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Whether `e` is a keyflow error (any lib's). */
export const isKeyflowError = (e: unknown): e is KeyflowError => e instanceof KeyflowError;

/**
 * Whether retrying may help, for any thrown value: a keyflow error says so itself; another error with a boolean
 * `retryable` (or kafkajs's `retriable`) is taken at its word; anything else is `fallback` (default true: a
 * transient failure is the safe guess for an unknown error).
 */
export function isRetryable(e: unknown, fallback = true): boolean {
  if (e instanceof KeyflowError) return e.retryable;
  const r =
    (e as { retryable?: unknown; retriable?: unknown } | null)?.retryable ??
    (e as { retriable?: unknown } | null)?.retriable;
  return typeof r === 'boolean' ? r : fallback;
}

/**
 * Settings that cannot work (a process's configuration, connection settings): `issues` names each bad setting,
 * never a secret's value. Not retryable: fix the settings. Thrown at startup, before anything connects.
 */
export abstract class SettingsError extends KeyflowError {
  readonly retryable = false;
  /**
   * @param what what the settings are for (`invalid <what>:` starts the message)
   * @param issues one line per bad setting
   */
  constructor(
    what: string,
    readonly issues: string[],
  ) {
    super(`invalid ${what}:\n${issues.map((i) => `  - ${i}`).join('\n')}`);
  }
}

/** Reads the files connection settings name, collecting issues (see ./setting-files). */
export { settingFileReader } from './setting-files';
