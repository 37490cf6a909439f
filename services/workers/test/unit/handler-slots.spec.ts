import { HandlerSlots } from '@keyflow/task-runtime';

/** Lets every pending promise callback run. */
const settle = () => new Promise((r) => setImmediate(r));

describe('HandlerSlots: handler calls bounded per process and per partition', () => {
  it("one partition takes at most its share; another partition's task still gets a slot", () => {
    const slots = new HandlerSlots(4, 2);
    const p0 = slots.partition('t', 0);
    const p1 = slots.partition('t', 1);
    expect(slots.tryAcquire(p0)).toBe(true);
    expect(slots.tryAcquire(p0)).toBe(true);
    expect(slots.tryAcquire(p0)).toBe(false); // its share is taken
    expect(slots.running).toBe(2);
    expect(slots.tryAcquire(p1)).toBe(true);
    expect(slots.running).toBe(3);
    expect(slots.partition('t', 0)).toBe(p0);
    expect(slots.partition('u', 0)).not.toBe(p0);
  });

  it('without a per-partition bound (>= the total) only the process bound holds', () => {
    const slots = new HandlerSlots(3, 3);
    const p = slots.partition('t', 0);
    expect(p).toBeUndefined();
    expect([0, 1, 2, 3].map(() => slots.tryAcquire(p))).toEqual([true, true, true, false]);
  });

  it('a failed try holds nothing: the partition slot goes back when the process has none', () => {
    const slots = new HandlerSlots(2, 1);
    const [a, b, c] = [0, 1, 2].map((i) => slots.partition('t', i));
    expect(slots.tryAcquire(a)).toBe(true);
    expect(slots.tryAcquire(b)).toBe(true);
    expect(slots.tryAcquire(c)).toBe(false); // the process is full; c's own slot must not stay taken
    slots.release(a);
    expect(slots.tryAcquire(c)).toBe(true);
    expect(slots.running).toBe(2);
  });

  it('a wait is granted in its partition, then in the process, in order, and holds both', async () => {
    const slots = new HandlerSlots(2, 1);
    const a = slots.partition('t', 0);
    const b = slots.partition('t', 1);
    expect(slots.tryAcquire(a)).toBe(true);
    const order: string[] = [];
    void slots.enqueue(a).granted.then(() => order.push('a')); // behind a's own slot
    expect(slots.tryAcquire(b)).toBe(true); // the process is now full
    void slots.enqueue(b).granted.then(() => order.push('b'));
    await settle();
    expect(order).toEqual([]);
    slots.release(a); // a's slot and a process slot: the first wait gets both
    await settle();
    expect(order).toEqual(['a']);
    expect(slots.running).toBe(2);
    slots.release(b);
    await settle();
    expect(order).toEqual(['a', 'b']);
    slots.release(a);
    slots.release(b);
    expect(slots.running).toBe(0);
    expect([slots.tryAcquire(a), slots.tryAcquire(b)]).toEqual([true, true]);
  });

  it('a wait cancelled in either line rejects with the reason and holds nothing afterwards', async () => {
    const slots = new HandlerSlots(2, 1);
    const a = slots.partition('t', 0);
    const b = slots.partition('t', 1);
    // In its partition's line.
    expect(slots.tryAcquire(a)).toBe(true);
    const inPartition = slots.enqueue(a);
    expect(inPartition.cancel(new Error('stopped'))).toBe(true);
    await expect(inPartition.granted).rejects.toThrow('stopped');
    expect(inPartition.cancel(new Error('again'))).toBe(false);
    slots.release(a);
    expect(slots.running).toBe(0);
    // In the process's line, its partition slot taken: given back.
    expect(slots.tryAcquire(a)).toBe(true);
    expect(slots.tryAcquire(slots.partition('t', 2))).toBe(true);
    const inProcess = slots.enqueue(b);
    await settle();
    expect(inProcess.cancel(new Error('revoked'))).toBe(true);
    await expect(inProcess.granted).rejects.toThrow('revoked');
    slots.release(a);
    expect(slots.tryAcquire(b)).toBe(true); // b's slot was given back
    // Granted in the turn of the cancel (its callbacks not run yet): both given back.
    slots.release(b);
    const racing = slots.enqueue(b);
    expect(racing.cancel(new Error('drain'))).toBe(true);
    await expect(racing.granted).rejects.toThrow('drain');
    await settle();
    expect(slots.running).toBe(1);
    expect(slots.tryAcquire(b)).toBe(true);
  });

  it("takes and gives back one step alone (a partition's slot, then the process's), and counts both lines as waiting", async () => {
    const slots = new HandlerSlots(2, 1);
    const a = slots.partition('t', 0);
    const b = slots.partition('t', 1);
    expect(slots.tryAcquire(a, 'partition')).toBe(true);
    expect(slots.running).toBe(0); // the process's slot not taken yet
    expect(slots.tryAcquire(a, 'partition')).toBe(false);
    const behind = slots.enqueue(a, 'partition');
    expect(slots.waiting).toBe(1);
    expect(slots.tryAcquire(a, 'process')).toBe(true);
    expect(slots.tryAcquire(b)).toBe(true);
    const inProcess = slots.enqueue(b, 'process');
    expect(slots.waiting).toBe(2);
    slots.release(a); // both of a's: its partition slot goes to `behind`, its process slot to `inProcess`
    await behind.granted;
    await inProcess.granted;
    expect(slots.waiting).toBe(0);
    expect(slots.running).toBe(2);
    slots.release(a, 'partition');
    slots.release(b, 'process');
    slots.release(b);
    expect(slots.running).toBe(0);
    // Without a per-partition bound the partition step takes nothing and is granted at once.
    const open = new HandlerSlots(2, 2);
    expect(open.tryAcquire(open.partition('t', 0), 'partition')).toBe(true);
    await open.enqueue(undefined, 'partition').granted;
    expect(open.running).toBe(0);
  });
});
