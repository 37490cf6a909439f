import { KafkaJSError, KafkaJSProtocolError } from 'kafkajs';
import { FIRST_REQUEST_TRIES, TRANSACTIONAL_RETRY, whileTransactionsConcurrent } from '../../src';

/** The error kafkajs throws for a request the transaction coordinator refused with CONCURRENT_TRANSACTIONS (51). */
const concurrent = () =>
  new KafkaJSProtocolError(
    Object.assign(
      new Error(
        'The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing',
      ),
      {
        type: 'CONCURRENT_TRANSACTIONS',
        code: 51,
      },
    ),
  );

describe('whileTransactionsConcurrent: a transaction request refused while the previous one completes', () => {
  it('is sent again until the coordinator takes it (kafkajs sends AddOffsetsToTxn once)', async () => {
    let calls = 0;
    const waits: number[] = [];
    const result = await whileTransactionsConcurrent(
      async () => {
        calls++;
        if (calls < 4) throw concurrent();
        return 'added';
      },
      { sleep: async (ms) => void waits.push(ms), random: () => 0.5 },
    );
    expect(result).toBe('added');
    expect(calls).toBe(4);
    // Short first wait (the previous transaction's markers take a few ms), doubling.
    expect(waits).toEqual([5, 10, 20]);
  });

  it('gives any other error back at once, and this one after its last try', async () => {
    const other = new KafkaJSError('broker gone', { retriable: true });
    let calls = 0;
    await expect(
      whileTransactionsConcurrent(
        async () => {
          calls++;
          throw other;
        },
        { sleep: async () => undefined },
      ),
    ).rejects.toBe(other);
    expect(calls).toBe(1);

    calls = 0;
    await expect(
      whileTransactionsConcurrent(
        async () => {
          calls++;
          throw concurrent();
        },
        { sleep: async () => undefined, maxTries: 3 },
      ),
    ).rejects.toMatchObject({ type: 'CONCURRENT_TRANSACTIONS' });
    expect(calls).toBe(3);
  });

  it("waits double up to TRANSACTIONAL_RETRY's longest, so a transaction's first request is tried for about 20 s, within a 30 s transaction timeout", async () => {
    const waits: number[] = [];
    await expect(
      whileTransactionsConcurrent(
        async () => {
          throw concurrent();
        },
        { sleep: async (ms) => void waits.push(ms), random: () => 0.5, maxTries: FIRST_REQUEST_TRIES },
      ),
    ).rejects.toMatchObject({ type: 'CONCURRENT_TRANSACTIONS' });
    expect(waits).toHaveLength(FIRST_REQUEST_TRIES - 1);
    expect(Math.max(...waits)).toBe(TRANSACTIONAL_RETRY.maxRetryTime);
    const total = waits.reduce((a, b) => a + b, 0);
    expect(total).toBeGreaterThan(10_000); // markers a loaded broker writes for seconds are waited out
    expect(total * 1.2).toBeLessThan(30_000); // and the open transaction never outlives its timeout waiting (jitter +20 %)
  });
});
