import { SourcePartition, type Mark } from '../../src/triggers/source-partition';

const open = () => true;
const closed = () => false;
const ready = () => true;

/** Reads `offsets` as the runner does: skips what was applied before, else applies it (nothing held). */
function readAll(p: SourcePartition<string>, offsets: bigint[]): bigint[] {
  const applied: bigint[] = [];
  for (const o of offsets) {
    const before = p.appliedBefore(o);
    p.read(o);
    if (!before) applied.push(o);
  }
  return applied;
}

describe('SourcePartition: which offsets of a source partition are applied', () => {
  it('a fresh partition applies what it reads, and its mark says so', () => {
    const p = new SourcePartition<string>(undefined);
    expect(p.started).toBe(false);
    expect(readAll(p, [0n, 1n, 2n])).toEqual([0n, 1n, 2n]);
    expect(p.started).toBe(true);
    expect(p.mark()).toEqual({ next: 3n, through: 3n, held: [] });
  });

  it('offsets with gaps (transaction markers, compaction) move next and through past the last read', () => {
    const p = new SourcePartition<string>(undefined);
    expect(readAll(p, [0n, 1n, 5n, 9n])).toEqual([0n, 1n, 5n, 9n]);
    expect(p.mark()).toEqual({ next: 10n, through: 10n, held: [] });
  });

  it('a partition whose first record is past 0 (retention) starts its mark there', () => {
    const p = new SourcePartition<string>(undefined);
    readAll(p, [40n, 41n]);
    expect(p.mark()).toEqual({ next: 42n, through: 42n, held: [] });
  });

  it('a held record keeps next at its offset while later records of other keys go ahead', () => {
    const p = new SourcePartition<string>(undefined);
    readAll(p, [0n]);
    p.read(1n);
    p.hold('k', 1n, 'r1');
    expect(p.mark()).toEqual({ next: 1n, through: 2n, held: [1n] });
    readAll(p, [2n, 4n]);
    expect(p.mark()).toEqual({ next: 1n, through: 5n, held: [1n] });
    expect(p.heldCount).toBe(1);
    expect([...p.heldRecords()]).toEqual([{ key: 'k', offset: 1n, record: 'r1' }]);
  });

  it('releasing the held record moves next past everything done', () => {
    const p = new SourcePartition<string>(undefined);
    p.read(0n);
    p.hold('k', 0n, 'r0');
    readAll(p, [3n, 7n]);
    expect(p.release(open, ready)).toEqual([{ key: 'k', offset: 0n, record: 'r0' }]);
    expect(p.mark()).toEqual({ next: 8n, through: 8n, held: [] });
    expect(p.heldCount).toBe(0);
  });

  it('a restart from a mark skips the applied offsets, applies the held ones, then goes on', () => {
    const mark: Mark = { next: 1n, through: 6n, held: [1n, 4n] };
    const p = new SourcePartition<string>(mark);
    // The consumer resumes at the committed group offset (next).
    expect(readAll(p, [1n, 2n, 4n, 5n, 6n, 8n])).toEqual([1n, 4n, 6n, 8n]);
    expect(p.mark()).toEqual({ next: 9n, through: 9n, held: [] });
  });

  it('a record held again after a restart stays held in the next mark', () => {
    const p = new SourcePartition<string>({ next: 1n, through: 3n, held: [1n] });
    expect(p.appliedBefore(1n)).toBe(false);
    p.read(1n);
    p.hold('k', 1n, 'r1');
    readAll(p, [2n, 3n]);
    expect(p.mark()).toEqual({ next: 1n, through: 4n, held: [1n] });
  });

  it('a group reset to earliest skips every applied offset and applies only the held ones and the new ones', () => {
    const p = new SourcePartition<string>({ next: 3n, through: 7n, held: [5n] });
    expect(readAll(p, [0n, 1n, 2n, 3n, 4n, 5n, 6n, 7n])).toEqual([5n, 7n]);
    expect(p.mark()).toEqual({ next: 8n, through: 8n, held: [] });
  });

  it('a group reset to later than a held record drops it (the operator skipped it) and next moves on', () => {
    const p = new SourcePartition<string>({ next: 1n, through: 6n, held: [1n, 4n] });
    // Reset to offset 3: 1 is skipped on purpose, 3 was applied, 4 is still held.
    expect(readAll(p, [3n, 4n, 5n])).toEqual([4n]);
    expect(p.mark()).toEqual({ next: 6n, through: 6n, held: [] });
    const q = new SourcePartition<string>({ next: 1n, through: 6n, held: [1n, 4n] });
    expect(readAll(q, [9n])).toEqual([9n]);
    expect(q.mark()).toEqual({ next: 10n, through: 10n, held: [] });
  });

  it('a mark taken before the held ones are read again lists them (a failed batch loses nothing)', () => {
    const p = new SourcePartition<string>({ next: 1n, through: 6n, held: [1n, 4n] });
    readAll(p, [1n, 2n]);
    expect(p.mark()).toEqual({ next: 4n, through: 6n, held: [4n] });
  });
});

describe('SourcePartition: per-key gates and queues', () => {
  it('a record without a key never waits', () => {
    const p = new SourcePartition<string>(undefined);
    p.hold('k', 0n, 'r0');
    p.gate(null, 'run-0');
    expect(p.mustWait(null, closed)).toBe(false);
  });

  it('a key waits while its previous run has not started, and goes once it has (the gate is then gone)', () => {
    const p = new SourcePartition<string>(undefined);
    p.gate('k', 'run-0');
    expect(p.mustWait('k', closed)).toBe(true);
    expect(p.mustWait('other', closed)).toBe(false);
    expect(p.mustWait('k', (id) => id === 'run-0')).toBe(false);
    expect(p.mustWait('k', closed)).toBe(false);
  });

  it('a key waits while a record of it is held, even with its gate open', () => {
    const p = new SourcePartition<string>(undefined);
    p.read(0n);
    p.hold('k', 0n, 'r0');
    expect(p.mustWait('k', open)).toBe(true);
  });

  it('release gives at most one record per key, in offset order, and only keys whose gate is open', () => {
    const p = new SourcePartition<string>(undefined);
    for (const [k, o] of [
      ['a', 0n],
      ['b', 1n],
      ['a', 2n],
      ['c', 3n],
    ] as const) {
      p.read(o);
      p.hold(k, o, `r${o}`);
    }
    p.gate('c', 'run-c');
    const first = p.release((id) => id !== 'run-c', ready);
    expect(first.map((h) => [h.key, h.offset])).toEqual([
      ['a', 0n],
      ['b', 1n],
    ]);
    expect(p.mark()).toEqual({ next: 2n, through: 4n, held: [2n, 3n] });
    p.gate('a', 'run-a0');
    expect(p.release((id) => id !== 'run-a0' && id !== 'run-c', ready)).toEqual([]);
    const second = p.release(open, ready);
    expect(second.map((h) => [h.key, h.offset])).toEqual([
      ['a', 2n],
      ['c', 3n],
    ]);
    expect(p.mark()).toEqual({ next: 4n, through: 4n, held: [] });
  });

  it('release leaves a record whose own target is not ready (a signal whose run has not appeared)', () => {
    const p = new SourcePartition<string>(undefined);
    p.read(0n);
    p.hold('k', 0n, 'signal');
    expect(p.release(open, (r) => r !== 'signal')).toEqual([]);
    expect(p.heldCount).toBe(1);
    expect(p.release(open, ready)).toHaveLength(1);
  });

  it('copyGates keeps every gate but those on the excepted runs (a failed transaction never started them)', () => {
    const from = new SourcePartition<string>(undefined);
    from.gate('a', 'run-a');
    from.gate('b', 'run-b');
    const to = new SourcePartition<string>(undefined);
    to.copyGates(from, new Set(['run-b']));
    expect(to.mustWait('a', closed)).toBe(true);
    expect(to.mustWait('b', closed)).toBe(false);
  });

  it('a gate goes once its run is heard of and open, so keys read once do not pile up (100,000 of them)', () => {
    const p = new SourcePartition<string>(undefined);
    for (let i = 0; i < 100_000; i++) p.gate(`key-${i}`, `run-${i}`);
    p.gate('key-0', 'run-0b'); // the key's later run: the earlier run's news must not open it
    expect(p.gateCount).toBe(100_000);
    const started = new Set<string>();
    for (let i = 0; i < 100_000; i++) {
      started.add(`run-${i}`);
      p.opened(`run-${i}`, (id) => started.has(id));
    }
    expect(p.gateCount).toBe(1);
    expect(p.mustWait('key-0', (id) => started.has(id))).toBe(true); // still behind run-0b
    p.opened('run-0b', closed); // heard of, not open yet (serializeBy key: not ended)
    expect(p.gateCount).toBe(1);
  });

  it('a run that gates two keys (two records started the same run) frees both gates once it is heard of and open', () => {
    const p = new SourcePartition<string>(undefined);
    p.gate('a', 'run-1');
    p.gate('b', 'run-1');
    expect(p.gateCount).toBe(2);
    p.opened('run-1', closed);
    expect(p.gateCount).toBe(2);
    p.opened('run-1', open);
    expect(p.gateCount).toBe(0);
    // One of the keys moves on to another run: the first run's news no longer touches it.
    p.gate('a', 'run-2');
    p.gate('b', 'run-2');
    p.gate('a', 'run-3');
    p.opened('run-2', open);
    expect(p.gateCount).toBe(1);
    expect(p.mustWait('a', (id) => id === 'run-2')).toBe(true); // still behind run-3
  });
});

/** A small seeded PRNG (mulberry32): the same seed gives the same sequence, so a failure names its seed. */
function prng(seed: number): (n: number) => number {
  let a = seed >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

/** A partition's log: offsets with gaps, each with a key (or null). */
function logOf(rand: (n: number) => number, size: number): Array<{ offset: bigint; key: string | null }> {
  const log: Array<{ offset: bigint; key: string | null }> = [];
  let o = 0n;
  for (let i = 0; i < size; i++) {
    o += BigInt(1 + (rand(4) === 0 ? rand(3) + 1 : 0));
    log.push({ offset: o, key: rand(5) === 0 ? null : `k${rand(3)}` });
  }
  return log;
}

/**
 * The runner's use of a partition, in batches that each end in one transaction (which may fail), with releases,
 * restarts from the committed mark, and group resets to earliest. @returns how often each offset was applied
 */
function simulate(seed: number): { counts: Map<bigint, number>; log: bigint[]; violations: string[] } {
  const rand = prng(seed);
  const log = logOf(rand, 30 + rand(30));
  const counts = new Map<bigint, number>();
  const violations: string[] = [];
  const started = new Set<string>();
  let draining = false;
  const gateOpen = (id: string) => draining || started.has(id);
  let committed: Mark | undefined;
  let part = new SourcePartition<bigint>(committed);
  let pos = 0;
  const restart = (earliest: boolean) => {
    part = new SourcePartition<bigint>(committed);
    const from = earliest || !committed ? 0n : committed.next;
    pos = log.findIndex((r) => r.offset >= from);
    if (pos < 0) pos = log.length;
  };
  const commit = (applied: bigint[], runs: string[]) => {
    if (!draining && rand(8) === 0) return restart(false); // the transaction failed: nothing of it happened
    if (!part.started) return;
    for (const o of applied) counts.set(o, (counts.get(o) ?? 0) + 1);
    for (const r of runs) started.add(r);
    committed = part.mark();
    for (const { offset } of log) {
      const want = offset < committed.through && !committed.held.includes(offset) ? 1 : 0;
      if ((counts.get(offset) ?? 0) !== want) violations.push(`seed ${seed}: offset ${offset} vs mark`);
    }
  };
  const apply = (key: string | null, o: bigint, applied: bigint[], runs: string[]) => {
    applied.push(o);
    runs.push(`run-${o}`);
    part.gate(key, `run-${o}`);
  };
  const readBatch = () => {
    const applied: bigint[] = [];
    const runs: string[] = [];
    for (let n = 1 + rand(5); n > 0 && pos < log.length; n--, pos++) {
      const { offset, key } = log[pos];
      if (part.appliedBefore(offset)) {
        part.read(offset);
        continue;
      }
      part.read(offset);
      if (part.mustWait(key, gateOpen)) part.hold(key!, offset, offset);
      else apply(key, offset, applied, runs);
    }
    commit(applied, runs);
  };
  const release = () => {
    const applied: bigint[] = [];
    const runs: string[] = [];
    for (const h of part.release(gateOpen, () => true)) apply(h.key, h.offset, applied, runs);
    if (applied.length) commit(applied, runs);
  };
  for (let step = 0; step < 400; step++) {
    const op = rand(10);
    if (op < 5 && pos < log.length) readBatch();
    else if (op < 8) release();
    else if (op === 8) {
      restart(rand(3) === 0);
    } else {
      // Runs started by the read model: open some gates.
      for (let o = 0; o < 3; o++) started.add(`run-${log[rand(log.length)].offset}`);
    }
  }
  // Then every run starts and no transaction fails: the partition is read to its end and nothing stays held.
  draining = true;
  while (pos < log.length || part.heldCount > 0) {
    readBatch();
    release();
  }
  return { counts, log: log.map((r) => r.offset), violations };
}

describe('SourcePartition: exactly once across restarts (seeded random runs)', () => {
  it.each(Array.from({ length: 100 }, (_, i) => i + 1))(
    'seed %i: every committed mark states the applied offsets, and at the end each offset was applied once',
    (seed) => {
      const { counts, log, violations } = simulate(seed);
      expect(violations.slice(0, 3)).toEqual([]);
      for (const o of log) expect([o, counts.get(o) ?? 0]).toEqual([o, 1]);
    },
  );
});
