import { isRetryable } from './base';

/**
 * What a failure record holds of a thrown value (a TaskFailed's `error`, a DLQ record's triage headers): the
 * error's class name, its message, its machine-readable code and whether retrying may help.
 */
export interface Failure {
  /** The error's `name` (its class, for a keyflow error), as text. */
  errorClass: string;
  /** The error's `message`, as text ('' when it has none). */
  message: string;
  /** The error's `code`: a string one as it is, a number (a driver's, gRPC's) in decimal; null for anything else. */
  code: string | null;
  /** Whether retrying may help (see {@link isRetryable}), unless the caller decided it. */
  retryable: boolean;
}

/** How {@link toFailure} reads a thrown value. */
export interface FailureOptions {
  /** The retry flag to record, when the caller decided it; else `isRetryable(e, fallback)`. */
  retryable?: boolean;
  /** The flag of a value that does not say (see {@link isRetryable}); default true. */
  fallback?: boolean;
  /** Longest `errorClass` and `code`, in characters (a longer one is cut, an ellipsis marks the cut); default none. */
  maxNameChars?: number;
  /** Longest `message`, in characters (cut the same way); default none. */
  maxMessageChars?: number;
}

/**
 * The failure record of any thrown value: an Error's name, message and code; anything else (a string, a number, an
 * object without a prototype) becomes an Error of its text first. Never throws.
 */
export function toFailure(e: unknown, opts: FailureOptions = {}): Failure {
  const err = e instanceof Error ? e : new Error(textOf(e));
  const name = opts.maxNameChars ?? Infinity;
  return {
    errorClass: bounded(textOf(err.name), name),
    message: bounded(textOf(err.message ?? ''), opts.maxMessageChars ?? Infinity),
    code: failureCode(err, name),
    retryable: opts.retryable ?? isRetryable(e, opts.fallback ?? true),
  };
}

/**
 * The machine-readable `code` of any value, as text: a string one (a keyflow error's, a handler's, Node's
 * `ECONNRESET`) as it is, cut to `maxChars` (an ellipsis marks the cut); a number or bigint (a database driver's,
 * gRPC's) in decimal; null for anything else (no code, not an object).
 */
export function failureCode(e: unknown, maxChars = Infinity): string | null {
  const code =
    (typeof e === 'object' || typeof e === 'function') && e !== null ? Reflect.get(e, 'code') : undefined;
  if (typeof code === 'string') return bounded(code, maxChars);
  return typeof code === 'number' || typeof code === 'bigint' ? String(code) : null;
}

/** `s`, cut to `max` characters (an ellipsis marks the cut). */
const bounded = (s: string, max: number): string => (s.length > max ? `${s.slice(0, max)}…` : s);

/** Text of any thrown value: String() of it, or its type tag when String() throws (an object without a prototype). */
export function textOf(v: unknown): string {
  if (typeof v === 'string') return v;
  try {
    return String(v);
  } catch {
    return Object.prototype.toString.call(v);
  }
}
