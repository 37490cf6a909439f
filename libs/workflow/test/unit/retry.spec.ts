import fc from 'fast-check';
import { backoffCapMs, backoffDelayMs, retryPolicy, shouldRetry, InvalidRetryPolicyError } from '../../src';

describe('retry policy', () => {
  it('fills every default so nothing downstream sees an optional field', () => {
    expect(retryPolicy()).toEqual({
      maxAttempts: 3,
      initialDelayMs: 200,
      maxDelayMs: 10_000,
      multiplier: 2,
      nonRetryableErrors: [],
    });
  });

  it('refuses a policy that cannot work, naming the field', () => {
    expect(() => retryPolicy({ maxAttempts: 0 })).toThrow(InvalidRetryPolicyError);
    expect(() => retryPolicy({ maxAttempts: 0 })).toThrow(/maxAttempts = 0/);
    expect(() => retryPolicy({ initialDelayMs: 500, maxDelayMs: 100 })).toThrow(/maxDelayMs/);
    expect(() => retryPolicy({ multiplier: 0.5 })).toThrow(/multiplier/);
  });

  it('the backoff cap grows exponentially and stops at the maximum', () => {
    const p = retryPolicy({ initialDelayMs: 100, maxDelayMs: 1_000, multiplier: 3 });
    expect([1, 2, 3, 4, 5].map((a) => backoffCapMs(p, a))).toEqual([100, 300, 900, 1_000, 1_000]);
  });

  it('full jitter: every delay lies in [0, cap] and both ends are reachable', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 5_000 }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.double({ min: 1, max: 5, noNaN: true }),
        fc.integer({ min: 1, max: 30 }),
        fc.double({ min: 0, max: 0.999999, noNaN: true }),
        (initial, extra, multiplier, attempt, r) => {
          const p = retryPolicy({ initialDelayMs: initial, maxDelayMs: initial + extra, multiplier });
          const d = backoffDelayMs(p, attempt, () => r);
          return d >= 0 && d <= backoffCapMs(p, attempt) && Number.isInteger(d);
        },
      ),
    );
    const p = retryPolicy({ initialDelayMs: 100 });
    expect(backoffDelayMs(p, 1, () => 0)).toBe(0);
    expect(backoffDelayMs(p, 1, () => 0.99999999)).toBe(100);
  });

  it('retries only retryable errors, within the attempt budget, never a listed error class', () => {
    const p = retryPolicy({ maxAttempts: 3, nonRetryableErrors: ['ValidationError'] });
    expect(shouldRetry(p, 1, 'Timeout', true)).toBe(true);
    expect(shouldRetry(p, 3, 'Timeout', true)).toBe(false);
    expect(shouldRetry(p, 1, 'Timeout', false)).toBe(false);
    expect(shouldRetry(p, 1, 'ValidationError', true)).toBe(false);
  });
});
