import { KeyflowError, retryableOf } from '@keyflow/errors';
/**
 * Retry policy: bounded attempts, exponential backoff with full jitter.
 *
 * Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter", 2015): the delay before attempt n+1 is
 * uniform in [0, min(maxDelayMs, initialDelayMs * multiplier^(n-1))]. It spreads retries of many clients that failed
 * together, which capped exponential backoff alone does not.
 */
export interface RetryPolicyInput {
  /** Total attempts including the first (>= 1). Default 3. */
  maxAttempts?: number;
  /** Cap of the first backoff in ms. Default 200. */
  initialDelayMs?: number;
  /** Largest backoff cap in ms. Default 10 000. */
  maxDelayMs?: number;
  /** Growth of the cap per attempt (>= 1). Default 2. */
  multiplier?: number;
  /** Error class names never retried, whatever the error says. */
  nonRetryableErrors?: string[];
}

/** A policy with every field set and checked (see {@link retryPolicy}). */
export type RetryPolicy = Readonly<Required<RetryPolicyInput>>;

/** An invalid policy. Not retryable: fix the configuration. */
export class InvalidRetryPolicyError extends KeyflowError {
  readonly code = 'INVALID_RETRY_POLICY';
  readonly retryable = retryableOf('INVALID_RETRY_POLICY');
  constructor(field: string, value: unknown, rule: string) {
    super(`invalid retry policy: ${field} = ${JSON.stringify(value)}; ${rule}`);
  }
}

/** Fills defaults and validates. @throws InvalidRetryPolicyError naming the field. */
export function retryPolicy(input: RetryPolicyInput = {}): RetryPolicy {
  const p = {
    maxAttempts: input.maxAttempts ?? 3,
    initialDelayMs: input.initialDelayMs ?? 200,
    maxDelayMs: input.maxDelayMs ?? 10_000,
    multiplier: input.multiplier ?? 2,
    nonRetryableErrors: [...(input.nonRetryableErrors ?? [])],
  };
  if (!Number.isInteger(p.maxAttempts) || p.maxAttempts < 1)
    throw new InvalidRetryPolicyError('maxAttempts', p.maxAttempts, 'an integer >= 1');
  if (!(p.initialDelayMs >= 0))
    throw new InvalidRetryPolicyError('initialDelayMs', p.initialDelayMs, '>= 0 ms');
  if (!(p.maxDelayMs >= p.initialDelayMs))
    throw new InvalidRetryPolicyError('maxDelayMs', p.maxDelayMs, '>= initialDelayMs');
  if (!(p.multiplier >= 1)) throw new InvalidRetryPolicyError('multiplier', p.multiplier, '>= 1');
  return Object.freeze(p);
}

/** Upper bound in ms of the backoff after failed attempt `attempt` (1-based): floor(min(max, initial * multiplier^(attempt-1))). */
export function backoffCapMs(policy: RetryPolicy, attempt: number): number {
  const exponential = policy.initialDelayMs * Math.pow(policy.multiplier, Math.max(0, attempt - 1));
  return Math.floor(Math.min(policy.maxDelayMs, exponential));
}

/**
 * Delay in ms before the attempt after failed attempt `attempt`: full jitter, uniform in [0, cap].
 * @param random a source in [0, 1) (default Math.random), injectable for deterministic replays and tests.
 */
export function backoffDelayMs(
  policy: RetryPolicy,
  attempt: number,
  random: () => number = Math.random,
): number {
  return Math.floor(random() * (backoffCapMs(policy, attempt) + 1));
}

/** Whether another attempt may follow failed attempt `attempt` for an error of class `errorClass`. */
export function shouldRetry(
  policy: RetryPolicy,
  attempt: number,
  errorClass: string,
  retryable: boolean,
): boolean {
  return retryable && attempt < policy.maxAttempts && !policy.nonRetryableErrors.includes(errorClass);
}
