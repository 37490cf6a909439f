/** Names of the orchestrator's parts that must keep running, as /health and the fatal log line name them. */
export const COMPONENTS = {
  /** The engine's consumer of wf.requests and task.results. */
  engineConsumer: 'engine consumer',
  /** The engine's producers: per-partition transactional ones, and the timer producer. */
  engineProducer: 'engine producer',
  /** The read model's consumer of wf.state. */
  readModel: 'read model',
  /** The API's producer of wf.requests (starts, cancels, signals, retries). */
  apiProducer: 'api producer',
} as const;
