import { workflow, type WorkflowDefinition } from '@keyflow/workflow';

/** Workflow definitions by name and version. A run keeps the version it started with. */
export class WorkflowRegistry {
  private readonly byName = new Map<string, Map<number, WorkflowDefinition>>();

  register(...defs: WorkflowDefinition[]): this {
    for (const d of defs) {
      const versions = this.byName.get(d.name) ?? new Map<number, WorkflowDefinition>();
      if (versions.has(d.version)) throw new Error(`workflow ${d.name} v${d.version} is registered twice`);
      versions.set(d.version, d);
      this.byName.set(d.name, versions);
    }
    return this;
  }

  /** The given version, or the latest when `version` is null/undefined. */
  get(name: string, version?: number | null): WorkflowDefinition | undefined {
    const versions = this.byName.get(name);
    if (!versions) return undefined;
    if (version !== undefined && version !== null) return versions.get(version);
    return versions.get(Math.max(...versions.keys()));
  }

  names(): string[] {
    return [...this.byName.keys()];
  }
}

/** Built-in definitions (run against the workers' built-in `echo` handler). */
export const builtinWorkflows = [
  workflow('three-step', 1)
    .task('first', { type: 'echo', input: (c) => ({ step: 1, input: c.input }) })
    .task('second', { type: 'echo', input: (c) => ({ step: 2, previous: c.outputs.first }) })
    .task('third', { type: 'echo', input: (c) => ({ step: 3, previous: c.outputs.second }) })
    .build(),
  /**
   * A map step over `input.count` items (default 10) on the `echo` handler, 64 in flight, then one step over all
   * outputs: the fan-out / fan-in shape at any size (bench:map --e2e, the map tests).
   */
  workflow('fan-out', 1)
    .map('each', {
      type: 'echo',
      items: (c) => Array.from({ length: Number(c.input.count ?? 10) }, (_, i) => i),
      input: (item) => ({ item }),
      concurrency: 64,
    })
    .task('sum', { type: 'echo', input: (c) => ({ n: (c.outputs.each as unknown[]).length }) })
    .build(),
  /**
   * The order saga example: each step has a compensation; `failAt` in the input (reserve, charge, ship, confirm)
   * injects a failure there, and the completed steps are compensated in reverse order.
   */
  workflow('order-saga', 1)
    .task('reserve', { type: 'order.reserve-inventory', compensate: { type: 'order.release-inventory' } })
    .task('charge', { type: 'order.charge-payment', compensate: { type: 'order.refund-payment' } })
    .task('ship', { type: 'order.create-shipment', compensate: { type: 'order.cancel-shipment' } })
    .task('confirm', { type: 'order.send-confirmation', compensate: { type: 'order.send-apology' } })
    .build(),
  /**
   * The GeoNames ETL: extract (stream the input into chunk blobs), transform each chunk in parallel (validate,
   * normalise, enrich, publish CityEnriched), dedupe across chunks, load each chunk into the sink, report.
   * Input: { source: 'default' | path, format?, chunkSize?, sink: { kind: 'sqlite', path } | { kind: 'postgres', url } }.
   */
  workflow('geonames-etl', 1)
    .task('extract', {
      type: 'etl.extract',
      input: (c) => ({
        source: c.input.source ?? 'default',
        format: c.input.format,
        chunkSize: c.input.chunkSize ?? 1000,
      }),
      timeoutMs: 600_000,
    })
    .map('transform', {
      type: 'etl.transform',
      items: (c) => (c.outputs.extract as { chunks: unknown[] }).chunks,
      entityKey: (_chunk, index, c) => `${c.runId}/${index}`,
      concurrency: 16,
      timeoutMs: 120_000,
    })
    .task('dedupe', {
      type: 'etl.dedupe',
      input: (c) => ({ chunks: c.outputs.transform }),
      timeoutMs: 600_000,
    })
    .map('load', {
      type: 'etl.load',
      items: (c) => (c.outputs.dedupe as { chunks: unknown[] }).chunks,
      input: (chunk, _index, c) => ({ ...(chunk as object), sink: c.input.sink }),
      entityKey: (_chunk, index, c) => `${c.runId}/${index}`,
      concurrency: 4,
      timeoutMs: 120_000,
    })
    .task('report', {
      type: 'etl.report',
      input: (c) => ({
        extract: c.outputs.extract,
        transform: c.outputs.transform,
        dedupe: c.outputs.dedupe,
        load: c.outputs.load,
        sink: c.input.sink,
      }),
      timeoutMs: 300_000,
    })
    .output((c) => c.outputs.report)
    .build(),
];
