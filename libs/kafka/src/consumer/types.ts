import type { IHeaders } from 'kafkajs';
import type { QuarantinedPartition } from './undecodable';

/** One record as the handler sees it. `offset` is a decimal string (int64). */
export interface ConsumedMessage {
  topic: string;
  partition: number;
  offset: string;
  key: Buffer | null;
  value: Buffer | null;
  headers: IHeaders;
  /** Broker or producer timestamp, ms since epoch, as a decimal string. */
  timestamp: string;
}

/** What a handler is told about its message's delivery; shared by the first deliveries of a batch, so read-only. */
export interface HandleContext {
  /**
   * Aborted when the consumer stops and the drain deadline passes (reason: an Error naming the deadline), or when
   * the message's partition is revoked in a rebalance (reason: PartitionRevokedError): its new owner redelivers it.
   */
  readonly signal: AbortSignal;
  /**
   * Aborted only when the consumer stops and its drain deadline passes (not on revocation): work that must finish
   * even for a revoked partition (writing the record of a step that ran) stops on this one.
   */
  readonly shutdown: AbortSignal;
  /**
   * Aborted as soon as stop() is called (reason: ConsumerStoppingError), before the drain deadline: work already
   * running goes on, work not started yet (e.g. waiting for a slot of its own) should not start. A handler that
   * rejects once this is aborted is not retried in place: the message stays uncommitted and is redelivered.
   */
  readonly draining: AbortSignal;
  /** Which infrastructure retry this is (0 on first delivery to the handler in this process). */
  readonly redeliveries: number;
}

/**
 * Handles one message. Resolve = done (it may be committed). Reject = the message could not even be dealt with
 * (broker or Redis down, DLQ unreachable): it is retried in place with backoff, holding its key, and never skipped.
 * Business failures must be turned into results or DLQ records by the handler, not thrown.
 */
export type MessageHandler = (message: ConsumedMessage, ctx: HandleContext) => Promise<void>;

/** Live figures for metrics and health. */
export interface ConsumerStats {
  inFlight: number;
  /** Partitions that cannot dispatch more work now: in-flight limit reached, or a message waiting to be retried. */
  pausedPartitions: number;
  assigned: number;
  committedTotal: number;
  /** Group joins since start: 1 when no rebalance happened. */
  joins: number;
  /** Partitions paused on a record batch no codec can decode (see ./undecodable). */
  quarantined: QuarantinedPartition[];
  /** Partitions whose next batch was fetched while their current one runs, and waits for it. */
  prefetched: number;
  crashed?: Error;
}
