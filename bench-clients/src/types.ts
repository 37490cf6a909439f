/**
 * What every client under comparison implements (issue 40, part 4). The driver (compare.ts) creates the topics,
 * fills the source, paces the chain and computes the figures, so the client modules hold only each client's own
 * produce/consume/transaction code, written as that client's documentation recommends.
 */
export interface RelayOptions {
  brokers: string[];
  /** Holds at least `n` records (6 partitions); read from the beginning. */
  source: string;
  /** Created by the driver (6 partitions). */
  out: string;
  /** A fresh consumer group, also the transactional id of a transactional relay. */
  group: string;
  /** Records to relay before resolving. */
  n: number;
}

/** A 3-hop chain: head -> [transactional hop] -> mid -> [plain hop] -> tail -> sink (read_committed). */
export interface ChainOptions {
  brokers: string[];
  /** Topic names, created by the driver (6 partitions each). */
  head: string;
  mid: string;
  tail: string;
  /** Group and transactional id prefix. */
  prefix: string;
  /** Called by the sink with the id (a record's key) of each record it reads, at once. */
  onDone(id: string): void;
}

export interface RunningChain {
  /** Produces one record keyed `id` to the head topic (acks=all, idempotent); resolves when acknowledged. */
  send(id: string): Promise<void>;
  stop(): Promise<void>;
}

export interface RelayResult {
  /** Seconds from the first batch read to the last commit. */
  secs: number;
  /** Batches handled (one produce + commit, or one transaction, each). */
  batches: number;
}

export interface ClientUnderTest {
  /** Short name for the table, with the version. */
  name: string;
  /**
   * Consume-produce in batches: each fetched batch is produced to `out` (idempotent, acks=all), then its offsets
   * are committed.
   */
  batchedRelay(o: RelayOptions): Promise<RelayResult>;
  /**
   * Consume-transform-produce with one transaction per fetched batch (send, the offsets in the transaction with the
   * group's generation where the client sends it, commit); read_committed.
   */
  transactionalRelay(o: RelayOptions): Promise<RelayResult>;
  startChain(o: ChainOptions): Promise<RunningChain>;
}
