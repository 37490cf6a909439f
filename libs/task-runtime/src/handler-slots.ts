import { Semaphore, type SlotWait } from '@keyflow/kafka';

/**
 * Which slots a call takes or gives back: both (the partition's, then the process's), or one of them alone (a
 * flow-limited task takes its partition's before its admission and the process's after, see TaskExecutor).
 */
export type SlotStep = 'both' | 'partition' | 'process';

/** A wait granted at once (a partition step without a per-partition bound). */
const GRANTED: SlotWait = { granted: Promise.resolve(), cancel: () => false };

/**
 * The handler slots of a task executor: at most `total` handler calls at once in the process
 * (WORKER_MAX_CONCURRENT_HANDLERS), and at most `perPartition` of them for the tasks of one topic partition
 * (WORKER_MAX_HANDLERS_PER_PARTITION), so that a partition whose handlers all hang never holds every slot and the
 * other partitions' tasks still run. With `perPartition >= total` there is no per-partition bound (one semaphore).
 *
 * A slot is taken in two steps, its partition's first, then the process's; a task waits in its partition's line, then
 * in the process's, first come first served in each. A wait cancelled at either step holds nothing afterwards.
 */
export class HandlerSlots {
  private readonly all: Semaphore;
  /** Per topic, per partition number: that partition's slots (made on first use; a worker has few partitions). */
  private readonly parts = new Map<string, Semaphore[]>();
  private readonly partitionBound: boolean;

  /**
   * @param total handler calls at once in the process (>= 1)
   * @param perPartition handler calls at once for one topic partition's tasks (>= 1; >= total: no such bound)
   */
  constructor(
    readonly total: number,
    readonly perPartition: number,
  ) {
    this.all = new Semaphore(total);
    this.partitionBound = perPartition < total;
  }

  /** Handler calls running now. */
  get running(): number {
    return this.total - this.all.free;
  }

  /** Attempts waiting for a slot, in the process's line or in a partition's (walks the partitions: for gauges). */
  get waiting(): number {
    let n = this.all.waiting;
    for (const ofTopic of this.parts.values()) for (const p of ofTopic) n += p?.waiting ?? 0;
    return n;
  }

  /** The slots of `topic` partition `partition`, or undefined without a per-partition bound. */
  partition(topic: string, partition: number): Semaphore | undefined {
    if (!this.partitionBound) return undefined;
    let ofTopic = this.parts.get(topic);
    if (!ofTopic) this.parts.set(topic, (ofTopic = []));
    return (ofTopic[partition] ??= new Semaphore(this.perPartition));
  }

  /**
   * Takes the slots of `step` at once when they are free (`both`: `part`'s and the process's); else takes nothing and
   * returns false.
   */
  tryAcquire(part: Semaphore | undefined, step: SlotStep = 'both'): boolean {
    if (step === 'process') return this.all.tryAcquire();
    if (step === 'partition') return part ? part.tryAcquire() : true;
    if (part && !part.tryAcquire()) return false;
    if (this.all.tryAcquire()) return true;
    part?.release();
    return false;
  }

  /**
   * Waits in line for the slots of `step`: `granted` resolves once they are held (`both`: the partition's, then the
   * process's). `cancel(reason)` (while not granted) rejects
   * `granted` with `reason` and holds nothing afterwards (a partition slot already taken is given back); false once
   * granted or cancelled.
   */
  enqueue(part: Semaphore | undefined, step: SlotStep = 'both'): SlotWait {
    if (step === 'partition') return part ? part.enqueue() : GRANTED;
    if (step === 'process' || !part) return this.all.enqueue();
    let stage: 'partition' | 'process' | 'granted' | 'cancelled' = 'partition';
    let wait = part.enqueue();
    let rejectGranted!: (reason: unknown) => void;
    const granted = new Promise<void>((resolve, reject) => {
      rejectGranted = reject;
      const onPartition = () => {
        if (stage === 'cancelled') return part.release(); // granted in the turn it was cancelled
        stage = 'process';
        wait = this.all.enqueue();
        wait.granted.then(
          () => {
            if (stage !== 'cancelled') {
              stage = 'granted';
              return resolve();
            }
            this.all.release();
            part.release();
          },
          () => undefined, // cancelled in line: see cancel
        );
      };
      wait.granted.then(onPartition, () => undefined);
    });
    return {
      granted,
      cancel: (reason) => {
        if (stage === 'granted' || stage === 'cancelled') return false;
        const was = stage;
        stage = 'cancelled';
        // Still in line: nothing more is taken. Granted, its callback not run yet: that callback gives it back.
        if (wait.cancel(reason) && was === 'process') part.release();
        rejectGranted(reason);
        return true;
      },
    };
  }

  /** Gives back the slots of `step` taken for `part` (the value given to tryAcquire or enqueue). */
  release(part: Semaphore | undefined, step: SlotStep = 'both'): void {
    if (step !== 'partition') this.all.release();
    if (step !== 'process') part?.release();
  }
}
