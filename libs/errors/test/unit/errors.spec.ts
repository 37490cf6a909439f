import { isKeyflowError, isRetryable, KeyflowError } from '../../src';

class Flaky extends KeyflowError<'FLAKY'> {
  readonly code = 'FLAKY';
  readonly retryable = true;
}
class Broken extends KeyflowError<'BROKEN'> {
  readonly code = 'BROKEN';
  readonly retryable = false;
}

describe('the one error base', () => {
  it('names each error after its class and keeps its code, retry flag and cause', () => {
    const cause = new Error('root');
    const e = new Broken('no', { cause });
    expect(e).toBeInstanceOf(Error);
    expect(isKeyflowError(e)).toBe(true);
    expect([e.name, e.code, e.retryable, e.cause]).toEqual(['Broken', 'BROKEN', false, cause]);
  });

  it('decides retries by the flag, never by the name or message', () => {
    expect(isRetryable(new Flaky('timeout'))).toBe(true);
    expect(isRetryable(new Broken('temporarily unavailable'))).toBe(false);
    expect(isRetryable(Object.assign(new Error('x'), { retriable: false }))).toBe(false);
    expect(isRetryable(new Error('unknown'))).toBe(true);
    expect(isRetryable(new Error('unknown'), false)).toBe(false);
  });
});
