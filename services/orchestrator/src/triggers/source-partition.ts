/**
 * One partition a topic trigger reads: which of its offsets are applied, and the records read but held behind their
 * key's previous run. Pure bookkeeping (no Kafka): the runner asks it what to do with each record and writes what it
 * says, with its {@link Mark}, in one transaction.
 *
 * Offsets are not contiguous (transaction markers, compaction), so the mark says which offsets are applied as "every
 * offset below `next`, and every offset below `through` but the `held` ones": records read after a held one (other
 * keys) go ahead of it, and a restart or a group reset to earlier skips them, applies the held ones, and goes on.
 */

/** How far a partition is applied, as written to wf.trigger-progress (offsets as bigints here). */
export interface Mark {
  /** Every offset below this one is applied. */
  next: bigint;
  /** Every offset below this one, but `held`, is applied (`through >= next`). */
  through: bigint;
  /** Offsets in [next, through) read and not applied yet, ascending. */
  held: bigint[];
  /**
   * Per wf.requests partition, the offset of the last request this source partition's transactions wrote there (a
   * new owner waits until the engine has applied them: see TriggerRunner). Absent: none written.
   */
  requests?: Array<{ partition: number; offset: bigint }>;
}

/** What a record needs before it can go out: nothing, its key's previous run, or (a signal) its target run. */
export type Gate = { kind: 'none' } | { kind: 'run'; runId: string };

/** A record held in its key's queue: its offset and what the runner keeps to apply it later. */
export interface Held<R> {
  offset: bigint;
  record: R;
}

/**
 * The bookkeeping of one source partition. `key` arguments are the record keys' text; a null key is never held
 * behind another record (records without a key have no order to keep).
 */
export class SourcePartition<R> {
  private next: bigint;
  private through: bigint;
  /** Offsets read and held, in [next, through): what the mark lists as `held`. */
  private readonly heldOffsets = new Set<bigint>();
  /** Records held per key, in offset order. */
  private readonly queues = new Map<string, Array<Held<R>>>();
  /**
   * Per key, the run its next record waits for (its previous run), until that run has started (or ended): a gate
   * goes when it is found open, by the key's next record or when the runner hears of its run ({@link opened}), so
   * the gates are the keys whose run is still to come, not every key ever read.
   */
  private readonly gates = new Map<string, string>();
  /**
   * The keys each gated run's gates are on (the inverse of {@link gates}): one key as a string (the common case, no
   * Set per run), a Set when two records of different keys started the same run (a trigger whose run id is not
   * derived from the record key).
   */
  private readonly gateOfRun = new Map<string, string | Set<string>>();
  /** Offsets below the mark's `through` that were held when it was written (a replay re-reads and applies them). */
  private readonly replayHeld: Set<bigint>;
  private readAny = false;
  /** Per wf.requests partition, the offset of the last request written (see {@link Mark.requests}). */
  private readonly requests = new Map<number, bigint>();

  /**
   * @param mark the partition's last committed mark (undefined: none, the trigger never applied this partition)
   */
  constructor(mark: Mark | undefined) {
    this.next = mark?.next ?? -1n;
    this.through = mark?.through ?? -1n;
    this.replayHeld = new Set(mark?.held ?? []);
    for (const r of mark?.requests ?? []) this.requests.set(r.partition, r.offset);
  }

  /** Records that a request went to `partition` of wf.requests at `offset` (the mark then carries it). */
  wrote(partition: number, offset: bigint): void {
    const had = this.requests.get(partition);
    if (had === undefined || offset > had) this.requests.set(partition, offset);
  }

  /**
   * Whether the record at `offset` was applied already (by an earlier owner, before a restart or a group reset): it
   * is skipped. Records held when the mark was written are not applied: they are applied now.
   */
  appliedBefore(offset: bigint): boolean {
    if (offset >= this.through) return false;
    if (offset < this.next) return true;
    return !this.replayHeld.has(offset);
  }

  /** Records `offset` as read (every record the runner gets, applied before or not): the mark moves past it. */
  read(offset: bigint): void {
    if (!this.readAny) {
      this.readAny = true;
      // A group reset to later than a held record skipped it on purpose (the operator's reset).
      for (const o of this.replayHeld) if (o < offset) this.replayHeld.delete(o);
    }
    if (this.next < 0n) this.next = offset;
    if (offset >= this.through) this.through = offset + 1n;
    this.replayHeld.delete(offset);
    this.advance();
  }

  /** Whether a record of `key` must wait: a record of the key is held already, or its previous run has not started. */
  mustWait(key: string | null, gateOpen: (runId: string) => boolean): boolean {
    if (key === null) return false;
    if (this.queues.get(key)?.length) return true;
    const gate = this.gates.get(key);
    if (gate === undefined) return false;
    if (gateOpen(gate)) {
      this.ungate(key);
      return false;
    }
    return true;
  }

  /**
   * Holds a record of `key` (not null) behind the key's earlier records or run. The record was {@link read} (which
   * moved `next` past it): `next` goes back to it, so the mark lists it as held and a restart applies it.
   */
  hold(key: string, offset: bigint, record: R): void {
    const q = this.queues.get(key);
    if (q) q.push({ offset, record });
    else this.queues.set(key, [{ offset, record }]);
    this.heldOffsets.add(offset);
    if (offset < this.next) this.next = offset;
  }

  /** The key's next records wait for `runId` (the run its record just started). */
  gate(key: string | null, runId: string): void {
    if (key === null) return;
    this.ungate(key);
    this.gates.set(key, runId);
    const had = this.gateOfRun.get(runId);
    if (had === undefined) this.gateOfRun.set(runId, key);
    else if (typeof had === 'string') this.gateOfRun.set(runId, new Set([had, key]));
    else had.add(key);
  }

  /** `runId` changed (the read model read it): its gates go if it is open now (`gateOpen`). */
  opened(runId: string, gateOpen: (runId: string) => boolean): void {
    const keys = this.gateOfRun.get(runId);
    if (keys === undefined || !gateOpen(runId)) return;
    if (typeof keys === 'string') this.ungate(keys);
    else for (const key of [...keys]) this.ungate(key);
  }

  /** Gates in place: keys whose next record would wait for its previous run. */
  get gateCount(): number {
    return this.gates.size;
  }

  private ungate(key: string): void {
    const runId = this.gates.get(key);
    if (runId === undefined) return;
    this.gates.delete(key);
    const keys = this.gateOfRun.get(runId);
    if (keys === key) this.gateOfRun.delete(runId);
    else if (keys instanceof Set) {
      keys.delete(key);
      if (keys.size === 1) this.gateOfRun.set(runId, keys.values().next().value!);
      else if (keys.size === 0) this.gateOfRun.delete(runId);
    }
  }

  /**
   * Takes out the held records that may go now, in each key's offset order: a key's first record once its gate is
   * open (`gateOpen(runId)`), and `ready(record)` says whether the record itself may go (a signal whose run is
   * known). A record taken out must be applied (or dead-lettered) by the caller, which then gates its key again.
   * @returns at most one record per key: the caller gates the key on it before asking again.
   */
  release(
    gateOpen: (runId: string) => boolean,
    ready: (record: R) => boolean,
  ): Array<Held<R> & { key: string }> {
    const out: Array<Held<R> & { key: string }> = [];
    for (const [key, q] of this.queues) {
      const gate = this.gates.get(key);
      if (gate !== undefined) {
        if (!gateOpen(gate)) continue;
        this.ungate(key);
      }
      if (!ready(q[0].record)) continue;
      const first = q.shift()!;
      if (q.length === 0) this.queues.delete(key);
      this.heldOffsets.delete(first.offset);
      out.push({ ...first, key });
    }
    this.advance();
    return out;
  }

  /**
   * Takes over `from`'s gates but those on `except` (runs of a transaction that failed: they never started), so a
   * partition read again after a failed transaction keeps each key behind its committed previous run.
   */
  copyGates(from: SourcePartition<R>, except: ReadonlySet<string>): void {
    for (const [key, runId] of from.gates) if (!except.has(runId)) this.gate(key, runId);
  }

  /** The requests `from` wrote (committed ones among them; a failed transaction's extra offsets only make a wait longer). */
  copyRequests(from: SourcePartition<R>): void {
    for (const [partition, offset] of from.requests) this.wrote(partition, offset);
  }

  /** Records held, over all keys. */
  get heldCount(): number {
    return this.heldOffsets.size;
  }

  /** The held records, oldest key queue first (for status and timeouts). */
  *heldRecords(): Iterable<Held<R> & { key: string }> {
    for (const [key, q] of this.queues) for (const h of q) yield { ...h, key };
  }

  /** The mark to commit now; `next` is also the offset to commit for the consumer group. */
  mark(): Mark {
    const held = [...this.heldOffsets, ...this.replayHeld].filter((o) => o >= this.next).sort(cmp);
    const requests = [...this.requests].map(([partition, offset]) => ({ partition, offset }));
    return { next: this.next, through: this.through, held, ...(requests.length ? { requests } : {}) };
  }

  /** Whether anything was read since construction (a mark exists to commit). */
  get started(): boolean {
    return this.next >= 0n;
  }

  /** `next` moves to the lowest offset still held (or `through` when none is). */
  private advance(): void {
    let low = this.through;
    for (const o of this.heldOffsets) if (o < low) low = o;
    for (const o of this.replayHeld) if (o < low && o >= this.next) low = o;
    if (low > this.next) this.next = low;
  }
}

const cmp = (a: bigint, b: bigint) => (a < b ? -1 : a > b ? 1 : 0);
