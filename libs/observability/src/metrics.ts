import { Registry, collectDefaultMetrics, Counter, Gauge, Histogram } from 'prom-client';

export { Registry, Counter, Gauge, Histogram } from 'prom-client';

/**
 * A Prometheus registry for one process, with Node's default metrics (heap, event loop lag, GC) and
 * `service` as a default label. Expose `registry.metrics()` at GET /metrics.
 */
export function createMetricsRegistry(service: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  collectDefaultMetrics({ register: registry });
  return registry;
}

/** Latency buckets in seconds for task handlers and stages: 1 ms .. 60 s. */
export const LATENCY_BUCKETS_S = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** Helpers so every service names its metrics the same way: `keyflow_<name>`. */
export const metric = {
  counter: (r: Registry, name: string, help: string, labelNames: string[] = []) =>
    new Counter({ name: `keyflow_${name}`, help, labelNames, registers: [r] }),
  /** `collect`: called at each scrape to set the gauge's values (prom-client's collect hook). */
  gauge: (r: Registry, name: string, help: string, labelNames: string[] = [], collect?: (g: Gauge) => void) =>
    new Gauge({
      name: `keyflow_${name}`,
      help,
      labelNames,
      registers: [r],
      ...(collect
        ? {
            collect() {
              collect(this as Gauge);
            },
          }
        : {}),
    }),
  histogram: (
    r: Registry,
    name: string,
    help: string,
    labelNames: string[] = [],
    buckets = LATENCY_BUCKETS_S,
  ) => new Histogram({ name: `keyflow_${name}`, help, labelNames, buckets, registers: [r] }),
};
