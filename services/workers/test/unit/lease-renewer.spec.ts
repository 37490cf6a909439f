import pino from 'pino';
import { AbortFanout, AttemptSignals, LeaseRenewer } from '@keyflow/task-runtime';

const logger = pino({ level: 'silent' });
const lease = (key: string) => ({ key, token: `t-${key}`, attempt: 1 });

describe('LeaseRenewer', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('renews every watched lease at least every third of the lease time, with one timer for all', async () => {
    const renewed: string[] = [];
    const store = { leaseMs: 3_000, renew: async (l: { key: string }) => (renewed.push(l.key), true) };
    const r = new LeaseRenewer(store, logger);
    const stopA = r.watch(lease('a'), () => undefined);
    jest.advanceTimersByTime(400); // b is taken between two ticks
    r.watch(lease('b'), () => undefined);
    jest.advanceTimersByTime(1_100); // 1 500 ms after a, 1 100 after b: each is renewed within a period (1 000 ms)
    expect(renewed.filter((k) => k === 'a').length).toBeGreaterThanOrEqual(1);
    expect(renewed.filter((k) => k === 'b').length).toBeGreaterThanOrEqual(1);
    expect(jest.getTimerCount()).toBe(1);
    stopA();
    const before = renewed.filter((k) => k === 'a').length;
    jest.advanceTimersByTime(3_000);
    expect(renewed.filter((k) => k === 'a').length).toBe(before);
    expect(r.size).toBe(1);
  });

  it('stops its timer once no lease is watched, and starts it again for the next', () => {
    const store = { leaseMs: 300, renew: async () => true };
    const r = new LeaseRenewer(store, logger);
    const stop = r.watch(lease('a'), () => undefined);
    stop();
    jest.advanceTimersByTime(100);
    expect(jest.getTimerCount()).toBe(0);
    r.watch(lease('b'), () => undefined);
    expect(jest.getTimerCount()).toBe(1);
  });

  it('calls lost once when a renewal finds another holder, and stops renewing that lease', async () => {
    let calls = 0;
    const store = { leaseMs: 300, renew: async () => (calls++, false) };
    const lost: string[] = [];
    const r = new LeaseRenewer(store, logger);
    r.watch(lease('a'), (reason) => lost.push(reason));
    jest.advanceTimersByTime(200);
    await Promise.resolve();
    await Promise.resolve();
    jest.advanceTimersByTime(1_000);
    await Promise.resolve();
    expect(lost).toHaveLength(1);
    expect(calls).toBe(1);
    expect(r.size).toBe(0);
  });

  it('keeps a lease whose renewal cannot reach Redis, and tries again', async () => {
    let calls = 0;
    const store = {
      leaseMs: 300,
      renew: async () => {
        calls++;
        throw new Error('connection closed');
      },
    };
    const lost: string[] = [];
    const r = new LeaseRenewer(store, logger);
    r.watch(lease('a'), (reason) => lost.push(reason));
    for (let i = 0; i < 5; i++) {
      jest.advanceTimersByTime(100);
      await Promise.resolve();
    }
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(lost).toEqual([]);
    expect(r.size).toBe(1);
  });
});

describe('AttemptSignals', () => {
  it('a stop aborts the current attempt and every later one with its reason', () => {
    const s = new AttemptSignals();
    const first = s.next();
    expect(first.signal.aborted).toBe(false);
    const reason = new Error('revoked');
    s.stop(reason);
    expect(first.signal.reason).toBe(reason);
    expect(s.next().signal.reason).toBe(reason);
    s.stop(new Error('later'));
    expect(s.reason).toBe(reason);
  });

  it('a stop reaches the wait registered with onStop once, with its reason; a removed one is not called', () => {
    const s = new AttemptSignals();
    const removed = jest.fn();
    s.onStop(removed)();
    const called = jest.fn();
    s.onStop(called);
    const reason = new Error('lease lost');
    s.stop(reason);
    s.stop(new Error('later'));
    expect(removed).not.toHaveBeenCalled();
    expect(called).toHaveBeenCalledTimes(1);
    expect(called).toHaveBeenCalledWith(reason);
    const late = jest.fn();
    s.onStop(late); // registered after the stop: called at once
    expect(late).toHaveBeenCalledWith(reason);
  });
});

describe('AttemptSignals.attempt (the signal made on first read)', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());
  const timeout = () => new Error('timed out');

  it('an attempt whose signal is never read leaves no timer behind', () => {
    const a = new AttemptSignals().attempt(1_000, timeout);
    expect(jest.getTimerCount()).toBe(0);
    a.dispose();
    expect(jest.getTimerCount()).toBe(0);
  });

  it('a signal read before the deadline aborts at the deadline with the timeout reason', () => {
    const a = new AttemptSignals().attempt(1_000, timeout);
    jest.advanceTimersByTime(400);
    const signal = a.signal;
    expect(signal.aborted).toBe(false);
    jest.advanceTimersByTime(599);
    expect(signal.aborted).toBe(false);
    jest.advanceTimersByTime(1);
    expect((signal.reason as Error).message).toBe('timed out');
    expect(a.signal).toBe(signal);
  });

  it('a signal first read after the deadline is already aborted', () => {
    const a = new AttemptSignals().attempt(1_000, timeout);
    jest.advanceTimersByTime(1_500);
    expect(a.signal.aborted).toBe(true);
    expect((a.signal.reason as Error).message).toBe('timed out');
  });

  it('a stop before the first read gives an aborted signal with the stop reason, and a stop after aborts it', () => {
    const early = new AttemptSignals();
    const a = early.attempt(1_000, timeout);
    const reason = new Error('revoked');
    early.stop(reason);
    expect(a.signal.reason).toBe(reason);

    const late = new AttemptSignals();
    const b = late.attempt(1_000, timeout);
    const signal = b.signal;
    late.stop(reason);
    expect(signal.reason).toBe(reason);
  });

  it("a first read of an earlier attempt's signal never takes the place of the newest: a stop still reaches it", () => {
    const s = new AttemptSignals();
    const first = s.attempt(1_000, timeout);
    first.dispose();
    const second = s.attempt(1_000, timeout);
    const live = second.signal;
    const leftBehind = first.signal; // work of attempt 1 reads its signal only now
    const reason = new Error('lease lost');
    s.stop(reason);
    expect(live.reason).toBe(reason);
    expect(leftBehind.aborted).toBe(false); // made after the attempt was over, before the stop
  });

  it("a backoff's signal stays the one a stop aborts when the failed attempt's signal is first read meanwhile", () => {
    const s = new AttemptSignals();
    const failed = s.attempt(1_000, timeout); // not disposed yet: its finally runs after the backoff
    const backoff = s.next().signal;
    expect(failed.signal.aborted).toBe(false);
    expect(jest.getTimerCount()).toBe(0); // no deadline timer for an attempt that is over
    const reason = new Error('shutdown');
    s.stop(reason);
    expect(backoff.reason).toBe(reason);
  });

  it('dispose clears the deadline: a settled attempt is not aborted later', () => {
    const a = new AttemptSignals().attempt(1_000, timeout);
    const signal = a.signal;
    a.dispose();
    jest.advanceTimersByTime(5_000);
    expect(signal.aborted).toBe(false);
    expect(jest.getTimerCount()).toBe(0);
  });
});

describe('AbortFanout (one listener per signal for every task waiting on it)', () => {
  it('calls every function still registered once when the signal aborts, and none that was removed', () => {
    const fanout = new AbortFanout();
    const ac = new AbortController();
    const calls: string[] = [];
    fanout.on(ac.signal, () => calls.push('a'));
    const removeB = fanout.on(ac.signal, () => calls.push('b'));
    const twice = () => calls.push('c');
    fanout.on(ac.signal, twice);
    fanout.on(ac.signal, twice); // registered twice: called twice
    removeB();
    ac.abort(new Error('revoked'));
    ac.abort(new Error('again'));
    expect(calls.sort()).toEqual(['a', 'c', 'c']);
    fanout.on(ac.signal, () => calls.push('late')); // after the abort: called at once
    expect(calls).toContain('late');
  });

  it('one function that throws does not keep the others from being called; its error is rethrown apart', () => {
    const fanout = new AbortFanout();
    const ac = new AbortController();
    const called = jest.fn();
    fanout.on(ac.signal, () => {
      throw new Error('listener bug');
    });
    fanout.on(ac.signal, called);
    const deferred: Array<() => void> = [];
    const queue = jest.spyOn(globalThis, 'queueMicrotask').mockImplementation((f) => void deferred.push(f));
    try {
      ac.abort();
    } finally {
      queue.mockRestore();
    }
    expect(called).toHaveBeenCalledTimes(1);
    expect(deferred).toHaveLength(1);
    expect(() => deferred[0]()).toThrow('listener bug');
  });

  it('adds one listener to a signal however many functions wait on it', () => {
    const fanout = new AbortFanout();
    const ac = new AbortController();
    const add = jest.spyOn(ac.signal, 'addEventListener');
    const removers = Array.from({ length: 1_000 }, () => fanout.on(ac.signal, () => undefined));
    removers.forEach((r) => r());
    fanout.on(ac.signal, () => undefined);
    expect(add).toHaveBeenCalledTimes(1);
  });
});
