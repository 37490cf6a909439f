import { defineTask, z } from '@keyflow/workflow';
import { checkedByContract, NonRetryableTaskError, TaskInputError, type TaskContext } from '../../src';

const charge = defineTask({
  type: 'payment.charge',
  input: z.object({ amount: z.number().positive(), currency: z.string().default('EUR') }),
  output: z.object({ paymentId: z.string() }),
});
const ctx = {} as TaskContext;

describe('checkedByContract', () => {
  it('gives the handler the parsed input (defaults filled in) and returns its checked output', async () => {
    const seen: unknown[] = [];
    const run = checkedByContract(charge, async (input) => {
      seen.push(input);
      return { paymentId: 'p-1' };
    });
    await expect(run({ amount: 5 }, ctx)).resolves.toEqual({ paymentId: 'p-1' });
    expect(seen).toEqual([{ amount: 5, currency: 'EUR' }]);
  });

  it('an input the contract refuses is a TaskInputError INPUT_SCHEMA; the handler does not run', async () => {
    const handler = jest.fn(async () => ({ paymentId: 'p-1' }));
    const err = await checkedByContract(charge, handler)({ amount: -1 }, ctx).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskInputError);
    expect(err).toMatchObject({ code: 'INPUT_SCHEMA', retryable: false });
    expect(handler).not.toHaveBeenCalled();
  });

  it('an output the contract refuses is a NonRetryableTaskError OUTPUT_SCHEMA', async () => {
    const err = await checkedByContract(charge, async () => ({ paymentId: 7 }))({ amount: 1 }, ctx).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(NonRetryableTaskError);
    expect(err).toMatchObject({ code: 'OUTPUT_SCHEMA', retryable: false });
  });

  it("the handler's own errors pass through as they are", async () => {
    const declined = new NonRetryableTaskError('declined', { code: 'DECLINED' });
    await expect(
      checkedByContract(charge, async () => {
        throw declined;
      })({ amount: 1 }, ctx),
    ).rejects.toBe(declined);
  });
});
