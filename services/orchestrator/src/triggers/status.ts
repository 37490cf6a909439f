/**
 * What the ops API (`GET /ops/triggers`) and the console's queue panel show of each topic trigger of this instance.
 * Counts are of this instance's share (the source partitions assigned to it); lag is records (end offset minus the
 * trigger's committed position) per assigned partition, read at the last fetch.
 */
export interface TriggerStatus {
  name: string;
  kind: 'start' | 'signal';
  /** The source topic (broker name). */
  topic: string;
  /** The consumer group the trigger reads as (physical name). */
  group: string;
  /** The workflow it starts (start triggers) or the signal it delivers (signal triggers). */
  target: string;
  /** Runs started and not yet ended (start triggers), on this instance. */
  inFlight: number;
  /** The trigger's maxInFlight setting. */
  maxInFlight: number;
  /** Records read and waiting for their key's previous run (or for their signal's run), on this instance. */
  held: number;
  /** Whether reading is paused for backpressure on at least one assigned partition. */
  paused: boolean;
  /** Records behind the end of the source topic, over the assigned partitions. */
  lag: number;
  /** Per assigned partition of the source topic (and of the trigger's redrive topic while it has records). */
  partitions: Array<{
    topic: string;
    partition: number;
    lag: number;
    position: string;
    paused: boolean;
    held: number;
  }>;
  /** The trigger's DLQ topic (physical name). */
  dlq: string;
  /** Records since this instance started: started or signalled, dead-lettered, skipped as a replay. */
  counts: { applied: number; deadLettered: number; skippedReplay: number };
}

/**
 * Where the ops API reads the statuses of this instance's topic triggers (the trigger runners). `status()` answers
 * at once, from figures the runners keep (no broker call): one entry per trigger, an empty list when there is none.
 */
export interface TriggerStatusSource {
  status(): TriggerStatus[];
}
