import { KeyflowError } from '@keyflow/errors';
import { NonRetryableTaskError, RetryableTaskError, TaskInputError, TaskTimeoutError } from '../../src';

describe('task errors', () => {
  it("carry the thrower's code, else their class's default, and their retry flag", () => {
    expect(new NonRetryableTaskError('declined', { code: 'DECLINED' })).toMatchObject({
      code: 'DECLINED',
      retryable: false,
      name: 'NonRetryableTaskError',
    });
    expect(
      [
        new RetryableTaskError('x'),
        new NonRetryableTaskError('x'),
        new TaskInputError('x'),
        new TaskTimeoutError('x'),
      ].map((e) => [e.code, e.retryable, e instanceof KeyflowError]),
    ).toEqual([
      ['TASK_RETRYABLE', true, true],
      ['TASK_FAILED', false, true],
      ['TASK_INPUT', false, true],
      ['TASK_TIMEOUT', true, true],
    ]);
  });

  it("a handler's own subclass sets its default code and may take constructor parameters", () => {
    class ServiceDown extends RetryableTaskError {
      static override readonly defaultCode = 'SERVICE_DOWN';
      constructor(readonly service: string) {
        super(`${service} is down`);
      }
    }
    const e = new ServiceDown('billing');
    expect([e.code, e.retryable, e.service, e.name, e.message]).toEqual([
      'SERVICE_DOWN',
      true,
      'billing',
      'ServiceDown',
      'billing is down',
    ]);
  });
});
