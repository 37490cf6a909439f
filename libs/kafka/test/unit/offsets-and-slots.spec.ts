import { OffsetTracker, Semaphore } from '../../src';

describe('the offset tracker', () => {
  it('commits only the contiguous completed prefix, as next-offset-to-read', () => {
    const t = new OffsetTracker(['10', '11', '12', '13']);
    expect(t.committable()).toBeUndefined();
    expect(t.complete(2)).toBeUndefined(); // 10 and 11 still running
    expect(t.committable()).toBeUndefined();
    expect(t.complete(0)).toBe('10');
    expect(t.committable()).toBe('11');
    expect(t.complete(1)).toBe('12'); // 11 completes the run up to the already-done 12
    expect(t.committable()).toBe('13');
    expect(t.pending).toBe(1);
  });

  it('handles offsets beyond 2^53 exactly', () => {
    const big = '9007199254740993'; // 2^53 + 1
    const t = new OffsetTracker([big]);
    t.complete(0);
    expect(t.committable()).toBe('9007199254740994');
  });

  it('refuses a position outside its batch instead of committing past it', () => {
    const t = new OffsetTracker(['5', '6']);
    expect(() => t.complete(2)).toThrow(RangeError);
    expect(() => t.complete(-1)).toThrow(RangeError);
    expect(t.committable()).toBeUndefined();
  });

  it('counts a message completed twice once', () => {
    const t = new OffsetTracker(['5', '6']);
    expect(t.complete(0)).toBe('5');
    expect(t.complete(0)).toBeUndefined();
    expect(t.pending).toBe(1);
  });
});

describe('the semaphore', () => {
  it('bounds holders and serves waiters first come, first served', async () => {
    const s = new Semaphore(2);
    await s.acquire();
    await s.acquire();
    const order: number[] = [];
    const a = s.acquire().then(() => order.push(1));
    const b = s.acquire().then(() => order.push(2));
    expect(s.waiting).toBe(2);
    s.release();
    s.release();
    await Promise.all([a, b]);
    expect(order).toEqual([1, 2]);
    expect(s.free).toBe(0);
  });

  it('tryAcquire takes a free slot at once and never one a waiter is owed', async () => {
    const s = new Semaphore(1);
    expect(s.tryAcquire()).toBe(true);
    expect(s.tryAcquire()).toBe(false);
    const waiter = s.acquire();
    s.release(); // handed to the waiter, not freed
    expect(s.tryAcquire()).toBe(false);
    await waiter;
    s.release();
    expect(s.free).toBe(1);
  });

  it('a waiter whose signal aborts leaves the queue with its reason, and the slot goes to the next waiter', async () => {
    const s = new Semaphore(1);
    s.tryAcquire();
    const ac = new AbortController();
    const gone = s.acquire(ac.signal);
    const next = s.acquire();
    ac.abort(new Error('stopping'));
    await expect(gone).rejects.toThrow('stopping');
    expect(s.waiting).toBe(1);
    s.release();
    await next; // the aborted waiter took nothing
    s.release();
    expect(s.free).toBe(1);
  });

  it('an already aborted signal is refused at once, without a slot, even when one is free', async () => {
    const s = new Semaphore(1);
    await expect(s.acquire(AbortSignal.abort(new Error('gone')))).rejects.toThrow('gone');
    expect(s.free).toBe(1);
    expect(s.waiting).toBe(0);
  });

  it('a cancelled place in line takes no slot, and the next one in line gets the slot', async () => {
    const s = new Semaphore(1);
    expect(s.tryAcquire()).toBe(true);
    const first = s.enqueue();
    const second = s.enqueue();
    expect(s.waiting).toBe(2);
    expect(first.cancel(new Error('stopped'))).toBe(true);
    await expect(first.granted).rejects.toThrow('stopped');
    expect(first.cancel(new Error('again'))).toBe(false);
    expect(s.waiting).toBe(1);
    s.release();
    await second.granted;
    expect(second.cancel(new Error('too late'))).toBe(false); // granted: the holder owes its release
    s.release();
    expect(s.free).toBe(1);
    expect(s.waiting).toBe(0);
    const now = s.enqueue(); // a slot is free: granted at once, nothing waits
    await now.granted;
    expect([s.free, s.waiting, now.cancel(new Error('late'))]).toEqual([0, 0, false]);
  });
});
