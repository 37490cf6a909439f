import { failureCode, KeyflowError, textOf, toFailure } from '../../src';

class Gone extends KeyflowError {
  readonly code = 'BLOB_NOT_FOUND';
  readonly retryable = false;
}

describe('toFailure: the failure record of any thrown value', () => {
  it("keeps an error's class, message, code and retry flag", () => {
    expect(toFailure(new Gone('no blob'))).toEqual({
      errorClass: 'Gone',
      message: 'no blob',
      code: 'BLOB_NOT_FOUND',
      retryable: false,
    });
  });

  it('takes a numeric code in decimal, none as null, and the flag by isRetryable (fallback given) unless decided', () => {
    const driver = Object.assign(new Error('deadlock'), { code: 1213 });
    expect(toFailure(driver)).toMatchObject({ errorClass: 'Error', code: '1213', retryable: true });
    expect(toFailure(new Error('x'), { fallback: false })).toMatchObject({ code: null, retryable: false });
    expect(toFailure(new Gone('x'), { retryable: true }).retryable).toBe(true);
    expect(toFailure(Object.assign(new Error('x'), { retriable: false })).retryable).toBe(false);
  });

  it('makes an Error of a value that is not one, and never throws', () => {
    expect(toFailure('boom')).toMatchObject({ errorClass: 'Error', message: 'boom', code: null });
    const bare = Object.create(null) as object;
    expect(toFailure(bare)).toMatchObject({ message: '[object Object]' });
    expect(textOf(bare)).toBe('[object Object]');
  });

  it('bounds the class, code and message to the given lengths (an ellipsis marks the cut)', () => {
    const e = Object.assign(new Error('m'.repeat(20)), { name: 'N'.repeat(20), code: 'C'.repeat(20) });
    expect(toFailure(e, { maxNameChars: 5, maxMessageChars: 3 })).toMatchObject({
      errorClass: 'NNNNN…',
      code: 'CCCCC…',
      message: 'mmm…',
    });
    expect(failureCode({ code: 7n })).toBe('7');
    expect(failureCode(null)).toBeNull();
  });
});
