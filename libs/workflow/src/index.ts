export { retryPolicy, backoffCapMs, backoffDelayMs, shouldRetry, InvalidRetryPolicyError } from './retry';
export type { RetryPolicy, RetryPolicyInput } from './retry';
