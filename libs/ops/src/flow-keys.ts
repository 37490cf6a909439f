/**
 * Where the workers' flow control keeps its state in Redis (services/workers flow-limiter.ts writes it, the ops API
 * reads it): every key of a task type shares the hash tag `{<type>}`, so a Redis Cluster keeps them in one slot.
 */
export const flowKeys = (topicPrefix: string) => {
  const base = (type: string) => `${topicPrefix}keyflow:flow:{${type}}`;
  return {
    /** Hash: task type -> its limits as JSON (FlowLimit), written by each worker that has them. */
    limits: `${topicPrefix}keyflow:flow:limits`,
    /** Sorted set of the permits held (running handlers), scored by their expiry (ms, Redis clock). */
    held: (type: string) => `${base(type)}:held`,
    /** Prefix of the per-key sorted sets of permits (`<prefix><key>`). */
    keyPrefix: (type: string) => `${base(type)}:key:`,
    /** The rate's next start time (ms, Redis clock). */
    tat: (type: string) => `${base(type)}:tat`,
    /** Sorted set of the cluster-wide line of waiters, scored by ticket. */
    queue: (type: string) => `${base(type)}:queue`,
    /** Sorted set: waiter -> expiry (ms), renewed by its worker. */
    alive: (type: string) => `${base(type)}:alive`,
    /** Hash: waiter -> its per-key limit's key. */
    waiterKeys: (type: string) => `${base(type)}:waiter-keys`,
    /** The tickets' counter. */
    seq: (type: string) => `${base(type)}:seq`,
  };
};
